#include "memory/kv_code.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "agentkv/error.h"
#include "kernels/small_matvec.h"
#include "memory/state_io.h"

namespace agentkv::memory {
namespace {

constexpr char kMagic[8] = {'A', 'K', 'V', 'C', 'O', 'D', 'E', '1'};
constexpr uint32_t kVersion = 1;

// For a matrix with at most one nonzero per row: each row's column and value (column 0, value 0
// for an empty row); false otherwise.
bool monomial(const std::vector<float>& m, int64_t n, std::vector<int32_t>& index, std::vector<float>& scale) {
  index.assign(static_cast<size_t>(n), 0);
  scale.assign(static_cast<size_t>(n), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n; ++k) {
      const float v = m[static_cast<size_t>(i * n + k)];
      if (v == 0.0f) continue;
      if (scale[static_cast<size_t>(i)] != 0.0f) return false;
      index[static_cast<size_t>(i)] = static_cast<int32_t>(k);
      scale[static_cast<size_t>(i)] = v;
    }
  return true;
}

std::vector<float> transposed(const std::vector<float>& m, int64_t n) {
  std::vector<float> t(m.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n; ++k) t[static_cast<size_t>(k * n + i)] = m[static_cast<size_t>(i * n + k)];
  return t;
}

// The three products a code takes: into code units, back, and back transposed (the query's).
enum class Product { kToCode, kFromCode, kFromCodeTransposed };

// y = (to_code | from_code | from_code^T) x, through the scaled permutation when the maps are one
// (KvCodeMaps: to_index / from_index), else through the dense transposes.
void apply(const KvCodeMaps& m, Product p, const float* x, float* y, int64_t n) {
  const bool to = p == Product::kToCode;
  const std::vector<int32_t>& index = to ? m.to_index : m.from_index;
  const std::vector<float>& scale = to ? m.to_scale : m.from_scale;
  if (!index.empty()) {
    if (p == Product::kFromCodeTransposed) {
      std::fill(y, y + n, 0.0f);
      for (int64_t i = 0; i < n; ++i) y[index[static_cast<size_t>(i)]] += scale[static_cast<size_t>(i)] * x[i];
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = scale[static_cast<size_t>(i)] * x[index[static_cast<size_t>(i)]];
    }
    return;
  }
  // y = M x is M^T's rows summed; y = M^T x is M's.
  small_mat_t_vec((p == Product::kToCode ? m.to_code_t : p == Product::kFromCode ? m.from_code_t : m.from_code).data(), x, y, n);
}

}  // namespace

KvCode::KvCode(int64_t head_dim, int64_t n_head_kv, std::vector<KvCodeLayer> layers)
    : head_dim_(head_dim), n_head_kv_(n_head_kv), layers_(std::move(layers)) {
  if (head_dim_ <= 0 || head_dim_ % 32 != 0 || n_head_kv_ <= 0)
    throw Error("KV code: head_dim " + std::to_string(head_dim_) + " / " + std::to_string(n_head_kv_) + " KV heads are not a tqc3 shape");
  const size_t n2 = static_cast<size_t>(head_dim_ * head_dim_);
  for (const KvCodeLayer& l : layers_) {
    if (l.layer < 0 || l.layer > 4096) throw Error("KV code: layer id " + std::to_string(l.layer));
    if (static_cast<int64_t>(l.k.size()) != n_head_kv_ || static_cast<int64_t>(l.v.size()) != n_head_kv_ ||
        l.k_rows.n_heads() != n_head_kv_ || l.v_rows.n_heads() != n_head_kv_ || l.k_rows.head_dim() != head_dim_ ||
        l.v_rows.head_dim() != head_dim_)
      throw Error("KV code: layer " + std::to_string(l.layer) + " does not have " + std::to_string(n_head_kv_) + " heads of " + std::to_string(head_dim_));
    for (const auto* maps : {&l.k, &l.v})
      for (const KvCodeMaps& m : *maps) {
        if (m.to_code.size() != n2 || m.from_code.size() != n2) throw Error("KV code: a map of layer " + std::to_string(l.layer) + " has the wrong size");
        for (const auto* v : {&m.to_code, &m.from_code})
          for (float f : *v)
            if (!std::isfinite(f)) throw Error("KV code: a map of layer " + std::to_string(l.layer) + " holds a non-finite value");
      }
    if (by_model_layer_.size() <= static_cast<size_t>(l.layer)) by_model_layer_.resize(static_cast<size_t>(l.layer) + 1, -1);
    if (by_model_layer_[static_cast<size_t>(l.layer)] >= 0) throw Error("KV code: layer " + std::to_string(l.layer) + " appears twice");
    by_model_layer_[static_cast<size_t>(l.layer)] = static_cast<int>(&l - layers_.data());
  }
  // Derived: a scaled permutation (K's maps) as index / scale, any other map's transposes.
  for (KvCodeLayer& l : layers_)
    for (auto* maps : {&l.k, &l.v})
      for (KvCodeMaps& m : *maps) {
        if (monomial(m.to_code, head_dim_, m.to_index, m.to_scale) && monomial(m.from_code, head_dim_, m.from_index, m.from_scale))
          continue;
        m.to_index.clear(), m.from_index.clear(), m.to_scale.clear(), m.from_scale.clear();
        m.to_code_t = transposed(m.to_code, head_dim_);
        m.from_code_t = transposed(m.from_code, head_dim_);
      }
  const std::vector<uint8_t> bytes = serialize();
  std::memcpy(&id_, bytes.data() + bytes.size() - 8, 8);
}

const KvCodeLayer* KvCode::layer(int model_layer) const {
  if (model_layer < 0 || static_cast<size_t>(model_layer) >= by_model_layer_.size()) return nullptr;
  const int i = by_model_layer_[static_cast<size_t>(model_layer)];
  return i < 0 ? nullptr : &layers_[static_cast<size_t>(i)];
}

std::vector<uint8_t> KvCode::serialize() const {
  std::vector<uint8_t> out;
  StateWriter w(out);
  w.bytes({reinterpret_cast<const uint8_t*>(kMagic), sizeof kMagic});
  w.u32(kVersion);
  w.u32(static_cast<uint32_t>(head_dim_));
  w.u32(static_cast<uint32_t>(n_head_kv_));
  w.u32(static_cast<uint32_t>(layers_.size()));
  for (const KvCodeLayer& l : layers_) {
    w.i32(l.layer);
    for (int side = 0; side < 2; ++side) {
      const auto& maps = side == 0 ? l.k : l.v;
      const CodedHeads& rows = side == 0 ? l.k_rows : l.v_rows;
      for (int64_t h = 0; h < n_head_kv_; ++h) {
        w.bytes(rows.widths(h));
        w.floats(maps[static_cast<size_t>(h)].to_code);
        w.floats(maps[static_cast<size_t>(h)].from_code);
      }
    }
  }
  w.u64(static_cast<uint64_t>(XXH64(out.data(), out.size(), 0)));
  return out;
}

std::shared_ptr<const KvCode> KvCode::parse(const std::vector<uint8_t>& bytes, const std::string& what) {
  if (bytes.size() < sizeof kMagic + 8 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw Error(what + ": not an agentkv KV code file (made by `agentkv kv-calibrate`)");
  uint64_t sum = 0;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (sum != XXH64(bytes.data(), bytes.size() - 8, 0)) throw Error(what + ": KV code file is damaged (checksum mismatch)");
  StateReader r(std::span<const uint8_t>(bytes.data() + sizeof kMagic, bytes.size() - sizeof kMagic - 8), what);
  const uint32_t version = r.u32("version");
  if (version != kVersion) r.fail("KV code file version " + std::to_string(version) + " (this build reads " + std::to_string(kVersion) + ")");
  const uint32_t hd = r.u32("head_dim"), heads = r.u32("KV heads"), n_layers = r.u32("layers");
  if (hd == 0 || hd > 1024 || hd % 32 != 0 || heads == 0 || heads > 1024 || n_layers > 4096)
    r.fail("KV code file: head_dim " + std::to_string(hd) + ", " + std::to_string(heads) + " KV heads, " + std::to_string(n_layers) + " layers");
  std::vector<KvCodeLayer> layers(n_layers);
  const uint64_t n2 = static_cast<uint64_t>(hd) * hd;
  for (KvCodeLayer& l : layers) {
    l.layer = r.i32("layer");
    for (int side = 0; side < 2; ++side) {
      std::vector<std::vector<uint8_t>> widths(heads);
      auto& maps = side == 0 ? l.k : l.v;
      maps.resize(heads);
      for (uint32_t h = 0; h < heads; ++h) {
        const auto wb = r.bytes(hd, 1, "widths");
        widths[h].assign(wb.begin(), wb.end());
        for (auto* m : {&maps[h].to_code, &maps[h].from_code}) {
          const auto fb = r.bytes(n2, sizeof(float), "map");
          m->resize(n2);
          std::memcpy(m->data(), fb.data(), fb.size());
        }
      }
      (side == 0 ? l.k_rows : l.v_rows) = CodedHeads(hd, std::move(widths));
    }
  }
  r.expect_end("KV code file");
  try {
    return std::make_shared<const KvCode>(hd, heads, std::move(layers));
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
}

std::shared_ptr<const KvCode> KvCode::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open KV code file " + path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse(bytes, "KV code file " + path);
}

void KvCode::save(const std::string& path) const {
  const std::vector<uint8_t> bytes = serialize();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw Error("cannot write KV code file " + path);
}

void KvCode::encode_row(const KvCodeLayer& l, bool v, const float* row, uint8_t* dst) const {
  const auto& maps = v ? l.v : l.k;
  const CodedHeads& rows = v ? l.v_rows : l.k_rows;
  thread_local std::vector<float> u;
  u.resize(static_cast<size_t>(head_dim_));
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    apply(maps[static_cast<size_t>(h)], Product::kToCode, row + h * head_dim_, u.data(), head_dim_);
    rows.encode(h, u.data(), dst + static_cast<size_t>(h) * rows.head_bytes());
  }
}

void KvCode::decode_row(const KvCodeLayer& l, bool v, const uint8_t* src, float* row) const {
  const auto& maps = v ? l.v : l.k;
  const CodedHeads& rows = v ? l.v_rows : l.k_rows;
  thread_local std::vector<float> u;
  u.resize(static_cast<size_t>(head_dim_));
  for (int64_t h = 0; h < n_head_kv_; ++h) {
    rows.decode(h, src + static_cast<size_t>(h) * rows.head_bytes(), u.data());
    apply(maps[static_cast<size_t>(h)], Product::kFromCode, u.data(), row + h * head_dim_, head_dim_);
  }
}

// Each of n_head heads of one token, in place, through its KV head's map (GQA groups).
void KvCode::map_heads(const std::vector<KvCodeMaps>& maps, bool transposed_from, float* x, int64_t n_head) const {
  thread_local std::vector<float> t;
  t.resize(static_cast<size_t>(head_dim_));
  const int64_t group = n_head / n_head_kv_;
  const Product p = transposed_from ? Product::kFromCodeTransposed : Product::kFromCode;
  for (int64_t h = 0; h < n_head; ++h) {
    apply(maps[static_cast<size_t>(h / group)], p, x + h * head_dim_, t.data(), head_dim_);
    std::copy(t.begin(), t.end(), x + h * head_dim_);
  }
}

void KvCode::map_query(const KvCodeLayer& l, float* q, int64_t n_head) const { map_heads(l.k, true, q, n_head); }

void KvCode::map_output(const KvCodeLayer& l, float* o, int64_t n_head) const { map_heads(l.v, false, o, n_head); }

}  // namespace agentkv::memory
