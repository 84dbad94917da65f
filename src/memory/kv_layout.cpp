#include "memory/kv_layout.h"

#include <stdexcept>
#include <string>

#include "agentkv/error.h"

namespace agentkv::memory {

void KvLayout::refuse_seq(SeqId seq, const char* op) const {
  throw Error(std::string("kv cache: ") + op + ": sequence id " + std::to_string(seq) + " outside [0, " +
              std::to_string(n_seq_max) + ")");
}

void KvLayout::refuse_stream(uint32_t stream) const {
  throw Error("kv cache: stream " + std::to_string(stream) + " outside [0, " + std::to_string(n_streams()) + ")");
}

void KvLayout::refuse_cell(uint32_t cell) {
  throw std::logic_error("kv cache: cell " + std::to_string(cell) + " out of range");
}

}  // namespace agentkv::memory
