// Tensor element types with ggml's numeric ids, so GGUF files and state blobs are interchangeable
// with llama.cpp's. Block arithmetic lives here once: bytes = elements / block_size * type_size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace agentkv {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,  // i-quants (256)
  IQ4_NL = 20, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
  MXFP4 = 39,  // OCP microscaling FP4 (gpt-oss experts): E8M0 exponent + 32 E2M1 values
  // agentkv-private KV cache types (TurboQuant family, docs/quant-types.md): ids far above ggml's
  // (kAgentkvTypeBase + n), valid only in agentkv KV caches and state files, never in GGUF tensors.
  // tq4 is 0x4003: 0x4001 was its first codebook (no zero level), retired so that state files and
  // cached pages made with it are refused rather than decoded with the wrong levels.
  // tqc3 (0x4004): a calibrated code (kernels/coded_rows.h, memory/kv_code.h): its rows mean
  // something only together with the code file they were written under.
  TQ4 = 0x4003, TQ3 = 0x4002, TQC3 = 0x4004,
};
inline constexpr uint32_t kAgentkvTypeBase = 0x4000;

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;   // ggml's spelling: "f16", "q8_0", "q4_K", ...
  int64_t block_size;      // elements per block
  size_t type_size;        // bytes per block
  bool quantized;
  bool agentkv_only = false;  // an agentkv-private type: refused in GGUF files
};

// nullptr for ids agentkv does not know (the GGUF reader turns that into an error).
const GgmlTypeInfo* ggml_type_info(uint32_t id);
const GgmlTypeInfo& ggml_type_info(GgmlType t);
std::optional<GgmlType> ggml_type_from_name(std::string_view name);  // "q8_0", "Q8_0", "f16", ...
inline std::string_view ggml_type_name(GgmlType t) { return ggml_type_info(t).name; }

// Bytes for n elements; n must be a multiple of the block size (checked by callers that take input).
inline size_t ggml_row_size(GgmlType t, int64_t n) {
  const auto& info = ggml_type_info(t);
  return static_cast<size_t>(n / info.block_size) * info.type_size;
}

}  // namespace agentkv
