// Fitting a calibrated KV code (memory/kv_code.h, KV type tqc3) to a model's own rows.
// docs/quant-types.md, "Calibrated code", has the measurements behind each choice:
// - K: coordinates stay where they are (a fitted basis did no better on RoPE'd keys); a
//   coordinate's importance is its variance times the energy of the queries that read it, both
//   averaged over its RoPE pair (RoPE turns a pair by the position, so only the pair's energy is
//   position-free), because what a key's error costs is the score error q . dk.
// - V: the eigenbasis of the V rows' second moment, importance = the eigenvalue.
// Widths go to the most important coordinates first (reverse water-filling, greedily one bit at a
// time, by the uniform quantizer's distortion on N(0, 1)), 3.25 bits per element, 7 at most.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "memory/kv_code.h"

namespace agentkv::memory {

// Running second moments of what each attention layer stores and asks.
class KvMoments {
 public:
  // layers: the model layers that attend. n_head query heads share n_head_kv KV heads (GQA).
  KvMoments(std::vector<int> layers, int64_t head_dim, int64_t n_head, int64_t n_head_kv);

  // One token of `model_layer`: its query rows (n_head * head_dim), K and V rows (n_head_kv * head_dim).
  void add(int model_layer, const float* q, const float* k, const float* v);
  int64_t tokens(int model_layer) const;
  const std::vector<int>& layers() const { return layers_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t n_head() const { return n_head_; }
  int64_t n_head_kv() const { return n_head_kv_; }

  // Means over the tokens added: per KV head, K variances and query energies per coordinate
  // (summed over the group's query heads), and V's second-moment matrix (head_dim^2).
  std::vector<double> k_energy(size_t layer_index, int64_t head) const;
  std::vector<double> q_energy(size_t layer_index, int64_t head) const;
  std::vector<double> v_moment(size_t layer_index, int64_t head) const;

 private:
  struct Sums {
    std::vector<double> kk, qq, vv;  // per KV head: hd, hd, hd * hd
    int64_t n = 0;
  };
  std::vector<int> layers_;
  int64_t head_dim_, n_head_, n_head_kv_;
  std::vector<Sums> sums_;
  size_t index(int model_layer) const;
};

// rope_pair: the offset of a coordinate's RoPE partner (NEOX: head_dim / 2; 0: no pairing), for
// the first n_rot coordinates.
std::shared_ptr<const KvCode> fit_kv_code(const KvMoments& m, int64_t rope_pair, int64_t n_rot);

// Widths in [0, kCodedMaxWidth] for `importance` (one per coordinate) spending `bits` in all,
// each bit where it removes the most importance-weighted distortion.
std::vector<uint8_t> allocate_widths(const std::vector<double>& importance, int64_t bits);

// The uniform midrise quantizer of N(0, 1) with 2^w levels: the step minimizing its mean squared
// error, and that error (w = 0: no levels, error 1).
double uniform_step(int width);
double uniform_distortion(int width);

// Eigenvalues of a symmetric n x n matrix (cyclic Jacobi rotations) in no particular order, and
// with `vectors`, the eigenvectors as its columns (vectors[k * n + i]: component k of vector i).
std::vector<double> symmetric_eigen(std::vector<double> a, int n, std::vector<double>* vectors = nullptr);

}  // namespace agentkv::memory
