// The reference-run file of `agentkv bench quality` (--save-reference / --reference), as
// llama-perplexity's --kl-divergence-base: for every scored position, the full next-token
// log-probability distribution (f16), behind a header that names what the run depends on, so a
// reference from another model, text or window setting is refused instead of compared.
// docs/quality-bench.md, "Reference file", gives the byte layout.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "agentkv/ggml_type.h"
#include "agentkv/tokenizer.h"

namespace agentkv::tools {

inline constexpr char kReferenceMagic[8] = {'A', 'K', 'V', 'Q', 'R', 'E', 'F', '\0'};
inline constexpr uint32_t kReferenceVersion = 1;

// What the reference's distributions depend on; two runs are comparable when all of it matches.
struct ReferenceFingerprint {
  uint64_t model = 0;  // agentkv/session_state.h model_fingerprint()
  uint64_t text = 0;   // xxh64 of the text file's bytes
  uint32_t n_ctx = 0;  // -c
  uint32_t stride = 0;
  uint64_t n_windows = 0;  // after --chunks
  bool operator==(const ReferenceFingerprint&) const = default;
};

struct ReferenceHeader {
  uint32_t n_vocab = 0;
  ReferenceFingerprint fingerprint;
  GgmlType type_k = GgmlType::F16;  // the KV types of the reference run (for the report)
  GgmlType type_v = GgmlType::F16;
  double ppl = 0;                   // the reference run's perplexity (for ΔPPL)
  std::vector<Token> tokens;        // the scored tokens, one per position
};

uint64_t text_fingerprint(const std::string& text);

// Writes the header, then one position at a time; finish() stores the perplexity and checks that
// every position was written. A writer destroyed before finish() leaves an incomplete file that
// the reader refuses (its perplexity is NaN).
class ReferenceWriter {
 public:
  ReferenceWriter(const std::string& path, const ReferenceHeader& header);
  void append(const uint16_t* logprobs_f16);  // n_vocab values
  void finish(double ppl);

 private:
  std::string path_;
  std::ofstream out_;
  uint32_t n_vocab_;
  uint64_t n_positions_;
  uint64_t written_ = 0;
};

// Reads and checks the header; positions are then read in order.
class ReferenceReader {
 public:
  explicit ReferenceReader(const std::string& path);
  const ReferenceHeader& header() const { return header_; }
  // agentkv::Error naming what differs (model, text, window options, vocabulary, tokens).
  void require_matches(const ReferenceFingerprint& fingerprint, uint32_t n_vocab, const std::vector<Token>& tokens) const;
  void read(uint16_t* logprobs_f16);  // the next position's n_vocab values

 private:
  std::string path_;
  std::ifstream in_;
  ReferenceHeader header_;
  uint64_t read_ = 0;
};

}  // namespace agentkv::tools
