// Calibrated KV codes: what the tqc3 KV type writes its rows under (docs/quant-types.md,
// "Calibrated code"). A code is fitted once per model to its own rows over a text, kept in a
// file, and named by KvOptions::code; state files and cached pages record which code their
// rows were written under, so rows are never read under another.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/model.h"
#include "agentkv/tokenizer.h"

namespace agentkv {

namespace memory {
class KvCode;
}
// What commands and the server hold: the engine's code, opaque to them.
using KvCodePtr = std::shared_ptr<const memory::KvCode>;

struct KvCalibrationParams {
  uint32_t window = 1024;   // positions per window: each window is a fresh sequence from position 0
  uint32_t max_windows = 24;
  int n_threads = 2;
};

// Runs `tokens` through the model in windows (f16 KV, unrotated; spread evenly over the tokens,
// at most max_windows) and fits the code to the second
// moments of every attention layer's K / V rows and queries (memory/kv_code_fit.h). Throws Error
// for a model without attention layers, head widths that are not multiples of 32, K and V of
// different widths, or fewer tokens than one window.
std::shared_ptr<const memory::KvCode> calibrate_kv_code(const Model& model, const std::vector<Token>& tokens,
                                                        const KvCalibrationParams& params = {});

// Throws Error naming the file for anything but an intact code file.
std::shared_ptr<const memory::KvCode> load_kv_code(const std::string& path);
void save_kv_code(const memory::KvCode& code, const std::string& path);
// The checksum that names the code (in state files, `agentkv state info`, /props).
uint64_t kv_code_id(const memory::KvCode& code);
// "4 layers, 2 KV heads of 64, code id 0123456789abcdef": for logs and tools.
std::string describe_kv_code(const memory::KvCode& code);
// Throws Error unless the code fits the model: head width, KV heads, an entry per attention layer.
void check_kv_code(const memory::KvCode& code, const Model& model);

}  // namespace agentkv
