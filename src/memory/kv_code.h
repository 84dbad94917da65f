// A calibrated KV code (KV type tqc3, docs/quant-types.md "Calibrated code"): for each attention
// layer and KV head, the linear map that takes a K or V head row into code units and the map back,
// fitted to a model's own rows (memory/kv_code_fit.h) and kept in a file (docs/state-format.md,
// "KV code files"). The rows themselves are kernels/coded_rows.h's: integer codes of per-coordinate
// widths. Attention never maps keys back: the query is mapped once per head (K), and the output
// once per head (V), as the Hadamard rotation is (model/attention_block.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/coded_rows.h"

namespace agentkv::memory {

// One KV head of one layer, K or V: u = to_code * x, and x ~ from_code * decode(encode(u)).
// Both head_dim x head_dim, row-major.
struct KvCodeMaps {
  std::vector<float> to_code;
  std::vector<float> from_code;
  // Derived when a KvCode is made, one of the two: maps that scale and reorder coordinates (K's:
  // one nonzero per row) as u[i] = to_scale[i] * x[to_index[i]] and x[k] = from_scale[k] *
  // u[from_index[k]] (O(head_dim)); any other maps' transposes (products as row sums vectorize).
  std::vector<int32_t> to_index, from_index;
  std::vector<float> to_scale, from_scale;
  std::vector<float> to_code_t, from_code_t;
};

struct KvCodeLayer {
  int32_t layer = -1;            // the model layer
  std::vector<KvCodeMaps> k, v;  // per KV head
  CodedHeads k_rows, v_rows;     // the coordinates' widths
};

class KvCode {
 public:
  KvCode(int64_t head_dim, int64_t n_head_kv, std::vector<KvCodeLayer> layers);

  // Throws Error naming the file for anything that is not a whole, intact code file.
  static std::shared_ptr<const KvCode> load(const std::string& path);
  static std::shared_ptr<const KvCode> parse(const std::vector<uint8_t>& bytes, const std::string& what);
  std::vector<uint8_t> serialize() const;
  void save(const std::string& path) const;

  // The checksum of its serialized form: what state files and cached pages record, so that rows
  // written under one code are never read under another.
  uint64_t id() const { return id_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t n_head_kv() const { return n_head_kv_; }
  const std::vector<KvCodeLayer>& layers() const { return layers_; }
  // nullptr when the code has no entry for that model layer.
  const KvCodeLayer* layer(int model_layer) const;

  // A K (v = false) or V row of n_head_kv * head_dim floats into tqc3 bytes.
  void encode_row(const KvCodeLayer& l, bool v, const float* row, uint8_t* dst) const;
  // Back to floats (tests and tools; attention maps the query / output instead).
  void decode_row(const KvCodeLayer& l, bool v, const uint8_t* src, float* row) const;
  // In place, n_head query heads of one token: q_h := from_code_k(g)^T q_h, g its KV head, so that
  // q . x' = q_mapped . u for every key.
  void map_query(const KvCodeLayer& l, float* q, int64_t n_head) const;
  // In place, n_head output heads of one token (a mix of decoded V rows in code units): o_h :=
  // from_code_v(g) o_h.
  void map_output(const KvCodeLayer& l, float* o, int64_t n_head) const;

 private:
  int64_t head_dim_;
  int64_t n_head_kv_;
  std::vector<KvCodeLayer> layers_;
  std::vector<int> by_model_layer_;  // index into layers_, -1 for none
  void map_heads(const std::vector<KvCodeMaps>& maps, bool transposed_from, float* x, int64_t n_head) const;
  uint64_t id_ = 0;
};

}  // namespace agentkv::memory
