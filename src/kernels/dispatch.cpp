#include "kernels/dispatch.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <hwy/targets.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define AGENTKV_X86 1
#endif

namespace agentkv {
namespace {

#ifdef AGENTKV_X86
struct CpuidRegs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

CpuidRegs cpuid(unsigned leaf, unsigned subleaf) {
  CpuidRegs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) r = CpuidRegs{};
  return r;
}

// XCR0: which register states the OS saves on context switch.
unsigned long long read_xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#ifdef AGENTKV_X86
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  const CpuidRegs l0 = cpuid(0, 0);
  f.amd = l0.b == 0x68747541 && l0.d == 0x69746E65 && l0.c == 0x444D4163;  // "Auth" "enti" "cAMD"
  if (max_leaf < 7) return f;
  const CpuidRegs l1 = cpuid(1, 0);
  const bool osxsave = (l1.c >> 27) & 1;
  if (!osxsave) return f;
  const unsigned long long xcr0 = read_xcr0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;     // SSE + AVX state
  const bool os_zmm = (xcr0 & 0xE6) == 0xE6;   // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool fma = (l1.c >> 12) & 1;
  const bool f16c = (l1.c >> 29) & 1;
  const bool avx = (l1.c >> 28) & 1;
  const CpuidRegs l7 = cpuid(7, 0);
  const bool avx2 = (l7.b >> 5) & 1;
  const bool bmi2 = (l7.b >> 8) & 1;  // the AVX2 kernels are compiled with it (AGENTKV_TARGET_AVX2)
  f.avx2 = os_ymm && avx && avx2 && fma && f16c && bmi2;
  const bool avx512f = (l7.b >> 16) & 1, avx512dq = (l7.b >> 17) & 1;
  const bool avx512bw = (l7.b >> 30) & 1, avx512vl = (l7.b >> 31) & 1;
  f.avx512 = f.avx2 && os_zmm && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && ((l7.c >> 11) & 1);
  f.avx512_vbmi = f.avx512 && ((l7.c >> 1) & 1);
  const CpuidRegs l7_1 = cpuid(7, 1);
  f.avx512_bf16 = f.avx512 && ((l7_1.a >> 5) & 1);
#endif
  return f;
}

CpuLevel level_of(const CpuFeatures& f) {
  if (f.avx512) return CpuLevel::Avx512;
  if (f.avx2) return CpuLevel::Avx2;
  return CpuLevel::Scalar;
}

CpuLevel clamp(CpuLevel want) {
  const CpuLevel have = detected_cpu_level();
  return static_cast<int>(want) < static_cast<int>(have) ? want : have;
}

CpuLevel initial_level() {
  CpuLevel level = detected_cpu_level();
  if (const char* env = std::getenv("AGENTKV_CPU"); env && *env) {
    CpuLevel want;
    if (parse_cpu_level(env, &want)) {
      level = clamp(want);
    } else {
      std::fprintf(stderr, "agentkv: ignoring AGENTKV_CPU=%s (expected scalar, avx2 or avx512)\n", env);
    }
  }
  return level;
}

// Highway-dispatched kernels (attention, row ops) follow the level too: below the AVX-512 level
// they run Highway's AVX2 target, not the AVX-512 code the CPU would allow, so AGENTKV_CPU=avx2 on
// an AVX-512 machine runs (and measures) the code an AVX2-only machine runs. The scalar level
// keeps the AVX2 target as well: Highway's targets below it have no fused multiply-add, and that
// level reproduces the AVX2 build's fused orders.
void apply_to_highway(CpuLevel level) {
#ifdef AGENTKV_X86
  hwy::DisableTargets(level == CpuLevel::Avx512 ? 0 : (HWY_AVX2 - 1));
#else
  (void)level;
#endif
}

std::atomic<int>& level_slot() {
  static std::atomic<int> slot{[] {
    const CpuLevel level = initial_level();
    apply_to_highway(level);
    return static_cast<int>(level);
  }()};
  return slot;
}

// The level is settled before main(): a Highway kernel dispatched before any kernel asked for
// the level must already see AGENTKV_CPU.
[[maybe_unused]] const int settle_level_at_start_up = (level_slot(), 0);

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

CpuLevel detected_cpu_level() { return level_of(cpu_features()); }

CpuLevel active_cpu_level() {
  return static_cast<CpuLevel>(level_slot().load(std::memory_order_relaxed));
}

bool avx512_vnni_active() { return active_cpu_level() == CpuLevel::Avx512 && cpu_features().avx512_vnni; }
bool avx512_vbmi_active() { return active_cpu_level() == CpuLevel::Avx512 && cpu_features().avx512_vbmi; }

CpuLevel set_cpu_level(CpuLevel level) {
  const CpuLevel used = clamp(level);
  level_slot().store(static_cast<int>(used), std::memory_order_relaxed);
  apply_to_highway(used);
  return used;
}

int ggml_build_lanes() { return active_cpu_level() == CpuLevel::Avx512 ? 16 : 8; }

std::string_view cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::Scalar: return "scalar";
    case CpuLevel::Avx2: return "avx2";
    case CpuLevel::Avx512: return "avx512";
  }
  return "unknown";
}

bool parse_cpu_level(std::string_view name, CpuLevel* out) {
  std::string lower(name);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (CpuLevel l : {CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512}) {
    if (lower == cpu_level_name(l)) {
      *out = l;
      return true;
    }
  }
  return false;
}

}  // namespace agentkv
