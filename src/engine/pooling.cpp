#include "agentkv/pooling.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace agentkv {

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::None: return "none";
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Last: return "last";
  }
  return "?";
}

std::optional<Pooling> parse_pooling(const std::string& name) {
  for (Pooling p : {Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last})
    if (name == pooling_name(p)) return p;
  return std::nullopt;
}

std::optional<Pooling> pooling_from_gguf(uint32_t value) {
  switch (value) {
    case 0: return Pooling::None;
    case 1: return Pooling::Mean;
    case 2: return Pooling::Cls;
    case 3: return Pooling::Last;
    default: return std::nullopt;
  }
}

EmbeddingPool::EmbeddingPool(Pooling pooling, int64_t n_embd, size_t n_tokens)
    : pooling_(pooling), n_embd_(n_embd), n_tokens_(n_tokens) {
  if (pooling_ == Pooling::Mean) sum_.assign(static_cast<size_t>(n_embd), 0.0);
}

bool EmbeddingPool::wants(size_t i) const {
  switch (pooling_) {
    case Pooling::Cls: return i == 0;
    case Pooling::Last: return i + 1 == n_tokens_;
    default: return true;
  }
}

void EmbeddingPool::add(const float* row) {
  ++n_added_;
  if (pooling_ == Pooling::Mean) {
    for (int64_t j = 0; j < n_embd_; ++j) sum_[static_cast<size_t>(j)] += row[j];
    return;
  }
  rows_.emplace_back(row, row + n_embd_);
}

std::vector<std::vector<float>> EmbeddingPool::result() const {
  const size_t wanted = pooling_ == Pooling::None || pooling_ == Pooling::Mean ? n_tokens_ : (n_tokens_ > 0 ? 1 : 0);
  if (n_added_ != wanted) throw std::logic_error("embedding pool: rows missing");
  if (pooling_ != Pooling::Mean) return rows_;
  std::vector<float> mean(static_cast<size_t>(n_embd_));
  for (size_t j = 0; j < mean.size(); ++j) mean[j] = static_cast<float>(sum_[j] / static_cast<double>(n_tokens_));
  return {mean};
}

void normalize_embedding(std::vector<float>& row, int embd_normalize) {
  double sum = 0.0;
  switch (embd_normalize) {
    case -1: sum = 1.0; break;
    case 0:
      for (float x : row) sum = std::max(sum, static_cast<double>(std::fabs(x)));
      sum /= 32760.0;  // to the int16 range
      break;
    case 2:
      for (float x : row) sum += static_cast<double>(x) * x;
      sum = std::sqrt(sum);
      break;
    default:
      for (float x : row) sum += std::pow(std::fabs(static_cast<double>(x)), embd_normalize);
      sum = std::pow(sum, 1.0 / embd_normalize);
      break;
  }
  const float norm = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
  for (float& x : row) x *= norm;
}

}  // namespace agentkv
