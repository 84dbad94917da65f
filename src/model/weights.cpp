#include "model/weights.h"

#include "agentkv/error.h"
#include "gguf/gguf.h"

namespace agentkv {

WeightMatrix WeightBinder::matrix3d(const std::string& name, int64_t n_in, int64_t n_out,
                                    int64_t n_slices, int64_t index) {
  const int64_t ne[3] = {n_in, n_out, n_slices};
  const gguf::TensorInfo& t = g_.require_tensor(name, std::span<const int64_t>(ne, n_slices > 1 || index > 0 ? 3 : 2));
  const auto& info = ggml_type_info(t.type);
  if (n_in % info.block_size != 0)
    throw Error(g_.path() + ": tensor '" + name + "': row length not a multiple of its type's block size");
  used_.insert(name);
  WeightMatrix w;
  w.type = t.type;
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = ggml_row_size(t.type, n_in);
  w.data = t.data + static_cast<size_t>(index) * n_out * w.row_bytes;
  return w;
}

WeightMatrix WeightBinder::matrix(const std::string& name, int64_t n_in, int64_t n_out) {
  return matrix3d(name, n_in, n_out, 1, 0);
}

WeightMatrix WeightBinder::flattened(const std::string& name, std::span<const int64_t> ne) {
  const gguf::TensorInfo& t = g_.require_tensor(name, ne);
  int64_t n_in = 1;
  for (size_t i = 0; i + 1 < ne.size(); ++i) n_in *= ne[i];
  if (n_in % ggml_type_info(t.type).block_size != 0)
    throw Error(g_.path() + ": tensor '" + name + "': row length not a multiple of its type's block size");
  used_.insert(name);
  WeightMatrix w;
  w.type = t.type;
  w.n_in = n_in;
  w.n_out = ne.back();
  w.row_bytes = ggml_row_size(t.type, n_in);
  w.data = t.data;
  return w;
}

const float* WeightBinder::vector(const std::string& name, int64_t n) {
  const int64_t ne[1] = {n};
  const gguf::TensorInfo& t = g_.require_tensor(name, std::span<const int64_t>(ne, 1));
  if (t.type != GgmlType::F32) throw Error(g_.path() + ": tensor '" + name + "' must be f32");
  used_.insert(name);
  return reinterpret_cast<const float*>(t.data);
}

const float* WeightBinder::f32_matrix(const std::string& name, int64_t n0, int64_t n1) {
  const int64_t ne[2] = {n0, n1};
  const gguf::TensorInfo& t = g_.require_tensor(name, std::span<const int64_t>(ne, 2));
  if (t.type != GgmlType::F32) throw Error(g_.path() + ": tensor '" + name + "' must be f32");
  used_.insert(name);
  return reinterpret_cast<const float*>(t.data);
}

bool WeightBinder::has(const std::string& name) const { return g_.find_tensor(name) != nullptr; }

void WeightBinder::check_all_used(const std::set<std::string>& ignored_prefixes) const {
  for (const auto& t : g_.tensors()) {
    if (used_.count(t.name)) continue;
    bool ignored = false;
    for (const auto& p : ignored_prefixes) ignored |= t.name.rfind(p, 0) == 0;
    if (!ignored) throw Error(g_.path() + ": unexpected tensor '" + t.name + "' (not used by the " +
                              g_.metadata().get_string("general.architecture").value_or("?") + " architecture)");
  }
}

}  // namespace agentkv
