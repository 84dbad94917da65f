// Run-time CPU feature detection for the kernels. The library is built without -march flags, so
// every SIMD kernel is compiled for its own target and picked here, once, from what the CPU (and
// the OS, for AVX-512 register state) supports. AGENTKV_CPU=scalar|avx2|avx512 forces a lower
// level (a higher one than the CPU has is clamped), which tests use to exercise every path.
#pragma once
#include <string_view>

namespace agentkv {

enum class CpuLevel : int {
  Scalar = 0,  // portable C++
  Avx2 = 1,    // AVX2 + FMA + F16C + BMI2
  Avx512 = 2,  // AVX-512 F/BW/VL/DQ on top of Avx2
};

struct CpuFeatures {
  bool avx2 = false;  // with FMA, F16C and BMI2
  bool avx512 = false;  // F, BW, VL, DQ with OS support for the ZMM state
  bool avx512_vnni = false;
  bool avx512_vbmi = false;  // byte permutes across the register (vpermb): tqc3's unpacking
  bool avx512_bf16 = false;
  // AMD (cpuid vendor AuthenticAMD). Its cores stream one row front to back at close to full
  // speed, where rows interleaved a stride apart hold the hardware prefetcher back; Intel's cores
  // were the other way round (docs/performance.md, "Decode GEMVs and the CPU's prefetcher").
  bool amd = false;
};

// What the machine offers (detected once).
const CpuFeatures& cpu_features();
// Highest level the machine supports.
CpuLevel detected_cpu_level();
// Level the kernels use: detected_cpu_level(), lowered by AGENTKV_CPU or set_cpu_level().
CpuLevel active_cpu_level();
// The AVX-512 level is active and the CPU has VNNI (what the int8 GEMM kernels need).
bool avx512_vnni_active();
// The AVX-512 level is active and the CPU has VBMI.
bool avx512_vbmi_active();
// Forces a level for this process (clamped to what the CPU supports); returns the level now in use.
// Not thread-safe with kernels running: call it at start-up or between tests.
CpuLevel set_cpu_level(CpuLevel level);

// Floats per vector of the llama.cpp x86 build whose float orders the active level reproduces
// (reduction trees, vector/scalar split points, which form of its vector expf): 16, its AVX-512
// build, at the AVX-512 level; 8, its AVX2 build, at the AVX2 and scalar levels.
int ggml_build_lanes();

std::string_view cpu_level_name(CpuLevel level);
// "scalar", "avx2", "avx512" (case-insensitive); false for anything else.
bool parse_cpu_level(std::string_view name, CpuLevel* out);

}  // namespace agentkv
