// Type-switched entry points of quant.h: argument checks, then the per-type functions of
// quant_kernels.h, with dot products picked per CPU level.
#include "kernels/quant.h"

#include <string>

#include "agentkv/error.h"
#include "kernels/f16_row.h"
#include "kernels/quant_iq.h"
#include "kernels/quant_kernels.h"

namespace agentkv {
namespace {
using namespace quant_detail;

void check_length(GgmlType type, int64_t n, const char* what) {
  const auto& info = ggml_type_info(type);
  if (n < 0 || n % info.block_size != 0) {
    throw Error(std::string(what) + ": " + std::to_string(n) + " elements is not a multiple of " +
                std::string(info.name) + "'s block size " + std::to_string(info.block_size));
  }
}

[[noreturn]] void unsupported(GgmlType type, const char* what) {
  throw Error(std::string(what) + ": type " + std::string(ggml_type_name(type)) + " is not supported");
}

template <class Block>
const Block* as(const void* p) {
  return static_cast<const Block*>(p);
}
template <class Block>
Block* as(void* p) {
  return static_cast<Block*>(p);
}

}  // namespace

GgmlType vec_dot_type(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::F32:
    case GgmlType::TQC3: return GgmlType::F32;  // read through its code's widths (kernels/coded_rows.h)
    case GgmlType::F16: return GgmlType::F16;
    case GgmlType::BF16: return GgmlType::BF16;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::MXFP4:
    case GgmlType::TQ4:
    case GgmlType::TQ3: return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return GgmlType::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ4_XS: return GgmlType::Q8_K;
    default: unsupported(weight_type, "vec_dot_type");
  }
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  check_length(type, n, "dequantize_row");
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case GgmlType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case GgmlType::Q4_0: return dequantize_q4_0(as<BlockQ4_0>(src), dst, n);
    case GgmlType::Q4_1: return dequantize_q4_1(as<BlockQ4_1>(src), dst, n);
    case GgmlType::Q5_0: return dequantize_q5_0(as<BlockQ5_0>(src), dst, n);
    case GgmlType::Q5_1: return dequantize_q5_1(as<BlockQ5_1>(src), dst, n);
    case GgmlType::Q8_0: return dequantize_q8_0(as<BlockQ8_0>(src), dst, n);
    case GgmlType::Q8_1: return dequantize_q8_1(as<BlockQ8_1>(src), dst, n);
    case GgmlType::IQ4_NL: return dequantize_iq4_nl(as<BlockIQ4_NL>(src), dst, n);
    case GgmlType::MXFP4: return dequantize_mxfp4(as<BlockMXFP4>(src), dst, n);
    case GgmlType::TQ4:
    case GgmlType::TQ3:
      if (active_cpu_level() >= CpuLevel::Avx2)
        if (const DequantizeFn fn = avx2_dequantize(type)) return fn(src, dst, n);
      return type == GgmlType::TQ4 ? dequantize_tq4(as<BlockTQ4>(src), dst, n) : dequantize_tq3(as<BlockTQ3>(src), dst, n);
    case GgmlType::Q2_K: return dequantize_q2_K(as<BlockQ2_K>(src), dst, n);
    case GgmlType::Q3_K: return dequantize_q3_K(as<BlockQ3_K>(src), dst, n);
    case GgmlType::Q4_K: return dequantize_q4_K(as<BlockQ4_K>(src), dst, n);
    case GgmlType::Q5_K: return dequantize_q5_K(as<BlockQ5_K>(src), dst, n);
    case GgmlType::Q6_K: return dequantize_q6_K(as<BlockQ6_K>(src), dst, n);
    case GgmlType::Q8_K: return dequantize_q8_K(as<BlockQ8_K>(src), dst, n);
    default:
      if (is_iq_type(type)) return dequantize_iq(type, src, dst, n);
      unsupported(type, "dequantize_row");
  }
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  check_length(type, n, "quantize_row");
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case GgmlType::F16: return fp32_to_fp16_row(src, static_cast<uint16_t*>(dst), n);
    case GgmlType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case GgmlType::Q4_0: return quantize_q4_0(src, as<BlockQ4_0>(dst), n);
    case GgmlType::Q4_1: return quantize_q4_1(src, as<BlockQ4_1>(dst), n);
    case GgmlType::Q5_0: return quantize_q5_0(src, as<BlockQ5_0>(dst), n);
    case GgmlType::Q5_1: return quantize_q5_1(src, as<BlockQ5_1>(dst), n);
    case GgmlType::Q8_0: return quantize_q8_0(src, as<BlockQ8_0>(dst), n);
    case GgmlType::Q8_1: return quantize_q8_1(src, as<BlockQ8_1>(dst), n);
    case GgmlType::IQ4_NL: return quantize_iq4_nl(src, as<BlockIQ4_NL>(dst), n);
    case GgmlType::MXFP4: return quantize_mxfp4(src, as<BlockMXFP4>(dst), n);
    case GgmlType::TQ4: return quantize_tq4(src, as<BlockTQ4>(dst), n);
    case GgmlType::TQ3: return quantize_tq3(src, as<BlockTQ3>(dst), n);
    case GgmlType::Q2_K: return quantize_q2_K(src, as<BlockQ2_K>(dst), n);
    case GgmlType::Q3_K: return quantize_q3_K(src, as<BlockQ3_K>(dst), n);
    case GgmlType::Q4_K: return quantize_q4_K(src, as<BlockQ4_K>(dst), n);
    case GgmlType::Q5_K: return quantize_q5_K(src, as<BlockQ5_K>(dst), n);
    case GgmlType::Q6_K: return quantize_q6_K(src, as<BlockQ6_K>(dst), n);
    case GgmlType::Q8_K: return quantize_q8_K(src, as<BlockQ8_K>(dst), n);
    default:
      if (is_iq_type(type)) return quantize_iq(type, src, dst, n);
      unsupported(type, "quantize_row");
  }
}

void quantize_activation_row(GgmlType act_type, const float* src, void* dst, int64_t n) {
  switch (act_type) {
    case GgmlType::Q8_0:
      check_length(act_type, n, "quantize_activation_row");
      return quantize_q8_0_activation(src, as<BlockQ8_0>(dst), n);
    case GgmlType::Q8_1:
      check_length(act_type, n, "quantize_activation_row");
      return quantize_q8_1_activation(src, as<BlockQ8_1>(dst), n);
    default: return quantize_row(act_type, src, dst, n);
  }
}

VecDotFn vec_dot_fn(GgmlType type, CpuLevel level) {
  VecDotFn fn = nullptr;
  const CpuLevel usable = static_cast<int>(level) < static_cast<int>(detected_cpu_level())
                              ? level
                              : detected_cpu_level();
  // The i-quants' kernels live in their own table (quant_iq.h); the same fall-through by level.
  const bool iq = is_iq_type(type);
  if (usable == CpuLevel::Avx512) fn = iq ? avx512_iq_vec_dot(type) : avx512_vec_dot(type);
  if (!fn && usable >= CpuLevel::Avx2) fn = iq ? avx2_iq_vec_dot(type) : avx2_vec_dot(type);
  if (!fn) fn = iq ? scalar_iq_vec_dot(type) : scalar_vec_dot(type);
  if (!fn) unsupported(type, "vec_dot");
  return fn;
}

VecDotFn vec_dot_fn(GgmlType type) { return vec_dot_fn(type, active_cpu_level()); }

RowGroupDotFn row_group_dot_fn(GgmlType type, CpuLevel level) {
  const CpuLevel usable = static_cast<int>(level) < static_cast<int>(detected_cpu_level())
                              ? level
                              : detected_cpu_level();
  RowGroupDotFn fn = nullptr;
  if (usable == CpuLevel::Avx512) fn = avx512_row_group_dot(type);
  if (!fn && usable >= CpuLevel::Avx2) fn = avx2_row_group_dot(type);
  if (!fn) fn = scalar_row_group_dot(type);
  return fn;
}

RowGroupDotFn row_group_dot_fn(GgmlType type) { return row_group_dot_fn(type, active_cpu_level()); }

bool uses_row_group_kernel(GgmlType type, int64_t n_out) {
  return type == GgmlType::Q4_K && n_out % 8 == 0;
}

bool uses_repacked_order(GgmlType type, int64_t n_out) { return type == GgmlType::MXFP4 && n_out % 8 == 0; }

VecDotFn repacked_dot_fn(GgmlType type) { return type == GgmlType::MXFP4 ? dot_mxfp4_chain : nullptr; }

float vec_dot(GgmlType type, int64_t n, const void* weight_row, const void* act_row) {
  check_length(type, n, "vec_dot");
  return vec_dot_fn(type)(n, weight_row, act_row);
}

}  // namespace agentkv
