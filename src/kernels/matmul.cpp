// y = W x: activations are converted once per token to vec_dot_type(W.type) (as ggml-cpu does),
// then output rows are split across the thread pool. With several tokens the loops are tiled so a
// tile of weight rows is read from memory once and applied to a tile of tokens while it is still
// in cache; the per-(row, token) work is the dispatched vec_dot kernel, except that whole groups
// of 4 tokens of a q4_K weight follow llama.cpp's repacked GEMM numerics (row_group_dot_fn).
// One token of q8_0 / q4_K / q6_K goes to the multi-row GEMV kernels (gemv.h, same bits as vec_dot),
// and so do a few tokens of q8_0 / q6_K, and of q4_K outside row groups (gemv_batch_rows); more
// tokens to the register-blocked GEMMs (gemm_*.h). q4_K / q6_K / the i-quants have both at the AVX2 level too,
// q8_0 only with AVX-512 VNNI (the *_available() functions say what the active level has). mxfp4
// matrices with a multiple of 8 rows take llama.cpp's repacked order for every token count
// (gemm_mxfp4.h: a GEMV for 1-5 tokens, a GEMM beyond).
#include "kernels/matmul.h"
#include "agentkv/numerics.h"

#include <algorithm>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/op_profile.h"
#include "kernels/gemm_float.h"
#include "kernels/gemm_iq.h"
#include "kernels/gemm_mxfp4.h"
#include "kernels/gemm_q4_K.h"
#include "kernels/gemm_q6_K.h"
#include "kernels/gemm_q8_0.h"
#include "kernels/gemv.h"
#include "kernels/quant.h"

namespace agentkv {
namespace {

constexpr int64_t kRowTile = 16;   // weight rows kept hot while they meet a tile of tokens
constexpr int64_t kTokenTile = 8;  // tokens per tile
static_assert(kTokenTile % kRowGroupSize == 0, "row groups must not straddle token tiles");

std::string shape_of(const WeightMatrix& w) {
  return std::string(ggml_type_name(w.type)) + " [" + std::to_string(w.n_in) + " x " + std::to_string(w.n_out) + "]";
}

// Bytes between consecutive rows of w; checks the shape against the type's block size.
size_t checked_row_stride(const WeightMatrix& w, const char* what) {
  const auto* info = ggml_type_info(static_cast<uint32_t>(w.type));
  if (!info) throw Error(std::string(what) + ": unknown weight type id " + std::to_string(static_cast<uint32_t>(w.type)));
  if (w.n_in <= 0 || w.n_out < 0 || w.n_in % info->block_size != 0) {
    throw Error(std::string(what) + ": weight " + shape_of(w) + ": row length must be a positive multiple of " +
                std::to_string(info->block_size));
  }
  const size_t dense = ggml_row_size(w.type, w.n_in);
  if (w.row_bytes != 0 && w.row_bytes < dense) {
    throw Error(std::string(what) + ": weight " + shape_of(w) + ": row_bytes " + std::to_string(w.row_bytes) +
                " is smaller than a row (" + std::to_string(dense) + " bytes)");
  }
  if (!w.data && w.n_out > 0) throw Error(std::string(what) + ": weight " + shape_of(w) + " has no data");
  return w.row_bytes != 0 ? w.row_bytes : dense;
}

// Scratch for converted activations, reused across calls by the calling thread.
std::vector<uint8_t>& activation_scratch(size_t bytes) {
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch;
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
            int64_t y_stride, ThreadPool& pool, RowGrouping grouping) {
  op_profile::Scope profile(op_profile::Kind::kMatmul);
  const size_t w_stride = checked_row_stride(w, "matmul");
  if (n_tokens < 0 || (n_tokens > 1 && (x_stride < w.n_in || y_stride < w.n_out))) {
    throw Error("matmul: weight " + shape_of(w) + ": bad activation layout (" + std::to_string(n_tokens) +
                " tokens, x stride " + std::to_string(x_stride) + ", y stride " + std::to_string(y_stride) + ")");
  }
  if (n_tokens == 0 || w.n_out == 0) return;
  // F16 / F32 prefill goes where llama.cpp's goes (llamafile tinyBLAS); expert matrices do not.
  if (grouping == RowGrouping::kBatch && float_gemm_applies(w, n_tokens)) {
    float_gemm(w, x, n_tokens, x_stride, y, y_stride, pool);
    return;
  }

  const GgmlType act_type = vec_dot_type(w.type);
  // mxfp4 with a multiple of 8 rows: llama.cpp's repacked order for every token (quant.h).
  const bool repacked = uses_repacked_order(w.type, w.n_out);
  const VecDotFn dot = repacked ? repacked_dot_fn(w.type) : vec_dot_fn(w.type);
  // Activation rows that llama.cpp's repacked GEMM kernel would take (whole groups of 4 from the
  // start of the batch) get its numerics; the rest, and single rows, those of its GEMV kernel.
  const int64_t n_grouped = grouping == RowGrouping::kBatch && !batch_invariant() && uses_row_group_kernel(w.type, w.n_out)
                                ? n_tokens - n_tokens % kRowGroupSize
                                : 0;
  const RowGroupDotFn group_dot = n_grouped > 0 ? row_group_dot_fn(w.type) : nullptr;
  const int64_t n_in = w.n_in;

  // Activation rows in act_type: f32 weights read x in place, everything else converts a copy.
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  size_t act_stride = static_cast<size_t>(x_stride) * sizeof(float);
  if (act_type != GgmlType::F32) {
    act_stride = ggml_row_size(act_type, n_in);
    std::vector<uint8_t>& scratch = activation_scratch(act_stride * static_cast<size_t>(n_tokens));
    uint8_t* dst = scratch.data();
    auto convert = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) quantize_activation_row(act_type, x + t * x_stride, dst + t * act_stride, n_in);
    };
    if (n_tokens == 1) {
      convert(0, 1);
    } else {
      pool.parallel_for(n_tokens, convert);
    }
    act = dst;
  }

  if (repacked && mxfp4_matmul_available()) {
    mxfp4_matmul(w.data, w_stride, w.n_out, n_in, act, act_stride, n_tokens, y, y_stride, pool);
    return;
  }

  // One token (decode): the multi-row GEMV kernels, same bits as the per-row loop below. Decode
  // streams the weights, and one long run of rows per thread streams best: a fixed share per
  // thread here (chunks handed out on demand measured 0.91 x on Q4_K_M decode at the AVX2 level,
  // Zen 4; docs/performance.md "Splitting work between threads").
  if (n_tokens == 1 && gemv_preferred(w.type)) {
    const uint8_t* weights = w.data;
    pool.parallel_for(
        w.n_out, [&](int64_t row_begin, int64_t row_end) { gemv_rows(w.type, weights, w_stride, n_in, act, row_begin, row_end, y); },
        gemv_row_grain(w.type));
    return;
  }

  // A few tokens (several sequences decoding together): the batch GEMV reads each weight row once
  // for all of them, with the GEMV's prefetch; same bits as the per-dot loop below. Tokens that
  // take the row-group numerics (q4_K) stay on the paths below.
  if (n_tokens >= 2 && n_grouped == 0 && n_tokens <= gemv_batch_max_tokens(w.type)) {
    const uint8_t* weights = w.data;
    pool.parallel_for(
        w.n_out,
        [&](int64_t row_begin, int64_t row_end) {
          gemv_batch_rows(w.type, weights, w_stride, n_in, act, act_stride, n_tokens, row_begin, row_end, y, y_stride);
        },
        gemv_row_grain(w.type));
    return;
  }

  // q8_0 / q6_K / i-quant / q4_K prefill: register-blocked kernels with the same bits as the per-dot loop below.
  if (w.type == GgmlType::Q8_0 && n_tokens >= 2 && q8_0_gemm_available()) {
    q8_0_gemm(w.data, w_stride, w.n_out, n_in, act, act_stride, n_tokens, y, y_stride, pool);
    return;
  }
  if (w.type == GgmlType::Q6_K && n_tokens >= 2 && q6_K_gemm_available()) {
    q6_K_gemm(w.data, w_stride, w.n_out, n_in, act, act_stride, n_tokens, y, y_stride, pool);
    return;
  }
  if (n_tokens >= 2 && iq_gemm_available(w.type) && n_tokens >= iq_gemm_min_tokens(w.type)) {
    iq_gemm(w.type, w.data, w_stride, w.n_out, n_in, act, act_stride, n_tokens, y, y_stride, pool);
    return;
  }
  if (w.type == GgmlType::Q4_K && n_tokens >= 2 && q4_K_gemm_available()) {
    q4_K_gemm(w.data, w_stride, w.n_out, n_in, act, act_stride, n_tokens, n_grouped, y, y_stride, pool);
    return;
  }

  // A fixed share per thread, as for the GEMVs above (one token row by row streams; chunks
  // measured 0.96 x on Q8_0 decode at the AVX2 level).
  const uint8_t* weights = w.data;
  pool.parallel_for(
      w.n_out,
      [&](int64_t row_begin, int64_t row_end) {
        for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowTile) {
          const int64_t r1 = std::min(r0 + kRowTile, row_end);
          for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokenTile) {
            const int64_t t1 = std::min(t0 + kTokenTile, n_tokens);
            for (int64_t r = r0; r < r1; ++r) {
              const uint8_t* wrow = weights + static_cast<size_t>(r) * w_stride;
              for (int64_t t = t0; t < t1;) {
                if (t < n_grouped) {  // t is a multiple of 4 here: tiles and groups both start at 0
                  float out[kRowGroupSize];
                  group_dot(n_in, wrow, act + t * act_stride, act_stride, out);
                  for (int g = 0; g < kRowGroupSize; ++g) y[(t + g) * y_stride + r] = out[g];
                  t += kRowGroupSize;
                } else {
                  y[t * y_stride + r] = dot(n_in, wrow, act + t * act_stride);
                  ++t;
                }
              }
            }
          }
        }
      },
      kRowTile);
}

void get_row(const WeightMatrix& w, int64_t row, float* dst) {
  const size_t w_stride = checked_row_stride(w, "get_row");
  if (row < 0 || row >= w.n_out) {
    throw Error("get_row: row " + std::to_string(row) + " is outside weight " + shape_of(w));
  }
  dequantize_row(w.type, w.data + static_cast<size_t>(row) * w_stride, dst, w.n_in);
}

}  // namespace agentkv
