#include "agentkv/model_stats.h"

#include <fstream>
#include <string>

#include "gguf/gguf.h"
#include "model/model.h"

namespace agentkv {

ModelStats model_stats(const Model& model) {
  ModelStats s;
  const auto& cfg = model.config();
  for (const auto& t : ArchModel::of(model).gguf().tensors()) {
    s.n_params += t.n_elements();
    s.weight_bytes += t.nbytes;
    if (t.name == "token_embd.weight") {
      // Looked up one row per token, but read whole when it doubles as the output matrix.
      s.decode_bytes_per_token += cfg.tied_output ? t.nbytes : t.nbytes / t.ne[1];
    } else if (t.name.find("_exps.") != std::string::npos && cfg.n_expert > 0) {
      s.decode_bytes_per_token += t.nbytes / cfg.n_expert * cfg.n_expert_used;  // active experts only
    } else {
      s.decode_bytes_per_token += t.nbytes;
    }
  }
  return s;
}

uint64_t kv_bytes_per_token(const Model& model, GgmlType type_k, GgmlType type_v, int64_t depth) {
  const auto& cfg = model.config();
  const int64_t n_embd_kv = cfg.n_head_kv * cfg.head_dim_k;
  const uint64_t per_cell = ggml_row_size(type_k, n_embd_kv) + ggml_row_size(type_v, n_embd_kv);
  return per_cell * static_cast<uint64_t>(cfg.n_attention_layers()) * static_cast<uint64_t>(depth);
}

namespace {
uint64_t proc_status_kib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  return 0;
}
}  // namespace

uint64_t current_rss_bytes() { return proc_status_kib("VmRSS"); }
uint64_t peak_rss_bytes() { return proc_status_kib("VmHWM"); }

}  // namespace agentkv
