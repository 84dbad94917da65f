// Embeddings from a sequence's final hidden states (ContextParams::embeddings), as llama.cpp pools
// and normalizes them: pooling none (every token's row), mean, cls (the first token's), last; then
// common_embd_normalize's norms (-1 none, 0 max-abs scaled to int16, 1 taxicab, 2 euclidean, p > 2
// the p-norm).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace agentkv {

class Model;

// The model's own pooling type (GGUF `<arch>.pooling_type`, llama.cpp's numbering), if it has one.
std::optional<uint64_t> model_pooling_type(const Model& model);

enum class Pooling { None, Mean, Cls, Last };

const char* pooling_name(Pooling p);
// "none" | "mean" | "cls" | "last"; nullopt otherwise (llama.cpp's "rank" needs a classifier head).
std::optional<Pooling> parse_pooling(const std::string& name);
// The GGUF's <arch>.pooling_type value (0 none, 1 mean, 2 cls, 3 last); nullopt for others.
std::optional<Pooling> pooling_from_gguf(uint32_t value);

// Takes a sequence's rows in token order and pools them.
class EmbeddingPool {
 public:
  EmbeddingPool(Pooling pooling, int64_t n_embd, size_t n_tokens);
  // Whether token i (0-based, of n_tokens) contributes: its row must be passed to add().
  bool wants(size_t i) const;
  void add(const float* row);
  // none: one row per token; otherwise one row. Throws std::logic_error before every wanted row came.
  std::vector<std::vector<float>> result() const;

 private:
  Pooling pooling_;
  int64_t n_embd_;
  size_t n_tokens_;
  size_t n_added_ = 0;
  std::vector<std::vector<float>> rows_;  // none: every row; cls / last: the one
  std::vector<double> sum_;               // mean
};

// Scales row in place by llama.cpp's norm `embd_normalize`.
void normalize_embedding(std::vector<float>& row, int embd_normalize);

}  // namespace agentkv
