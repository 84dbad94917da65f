// The last layer of a decoder only carries on with the rows whose logits are wanted, and the
// output head turns them into logits (or hands out their final hidden states).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/weights.h"

namespace agentkv {

// The token embedding, the final norm and the output head (the embedding again when the file ties
// them), as every architecture's converter names them.
struct EmbeddingAndHead {
  WeightMatrix token_embd;
  const float* output_norm = nullptr;
  WeightMatrix output;
};
inline EmbeddingAndHead bind_embedding_and_head(WeightBinder& w, const ModelConfig& cfg) {
  EmbeddingAndHead h;
  h.token_embd = w.matrix("token_embd.weight", cfg.n_embd, cfg.n_vocab);
  h.output_norm = w.vector("output_norm.weight", cfg.n_embd);
  h.output = cfg.tied_output ? h.token_embd : w.matrix("output.weight", cfg.n_embd, cfg.n_vocab);
  return h;
}

// x's rows (n_embd floats each): the batch's input rows where a token has one (images; the first
// n_embd of each row_width-float row), else the token's embedding.
inline void input_rows(const ForwardBatch& b, const WeightMatrix& token_embd, int64_t n_embd, int64_t row_width, float* x) {
  for (size_t t = 0; t < b.tokens.size(); ++t) {
    if (!b.embd_row.empty() && b.embd_row[t] >= 0) std::memcpy(x + t * n_embd, b.embd + b.embd_row[t] * row_width, static_cast<size_t>(n_embd) * sizeof(float));
    else get_row(token_embd, b.tokens[t], x + t * n_embd);
  }
}

// Moves the listed rows (ascending token indices) to the front of every buffer (`width` floats per
// row) and returns how many rows remain.
inline int64_t keep_output_rows(std::span<const int> rows, int64_t width, std::initializer_list<float*> buffers) {
  const int64_t n = static_cast<int64_t>(rows.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = rows[i];
    if (src == i) continue;
    for (float* buf : buffers) std::memcpy(buf + i * width, buf + src * width, static_cast<size_t>(width) * sizeof(float));
  }
  return n;
}

// The output norm of `rows` residual rows x into scratch, then the batch's embeddings (when it
// asks for them) or its logits through the head.
inline void output_head(const ForwardBatch& b, const float* x, int64_t rows, int64_t width, const float* norm,
                        float eps, const WeightMatrix& head, int64_t n_vocab, float* scratch, ThreadPool& pool) {
  for (int64_t t = 0; t < rows; ++t) rms_norm(x + t * width, norm, scratch + t * width, width, eps);
  if (b.embeddings) {
    std::copy(scratch, scratch + rows * width, b.embeddings);
    return;
  }
  matmul(head, scratch, rows, width, b.logits, n_vocab, pool);
}

}  // namespace agentkv
