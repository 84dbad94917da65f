// The fuzz build compiles the memory layer without the kernels (fuzz/CMakeLists.txt). Its targets
// build caches without a window, whose rows never change type, so these conversions are never
// called there; if one were, the fuzzer reports the abort as a crash.
#include <cstdio>
#include <cstdlib>

#include "memory/kv_row_convert.h"

namespace agentkv::memory {
namespace {
[[noreturn]] void unreached(const char* what) {
  std::fprintf(stderr, "fuzz build: %s reached, but the memory layer is built without the kernels\n", what);
  std::abort();
}
}  // namespace

void convert_kv_row(GgmlType, const uint8_t*, GgmlType, uint8_t*, int64_t) { unreached("convert_kv_row"); }
void dequantize_kv_row(GgmlType, const uint8_t*, float*, int64_t) { unreached("dequantize_kv_row"); }
void quantize_kv_row(GgmlType, const float*, uint8_t*, int64_t) { unreached("quantize_kv_row"); }

}  // namespace agentkv::memory
