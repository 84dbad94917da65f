// Fitting, loading and checking calibrated KV codes (agentkv/kv_code.h).
#include "agentkv/kv_code.h"

#include <algorithm>
#include <string>

#include "agentkv/batch.h"
#include "agentkv/context.h"
#include "agentkv/error.h"
#include "engine/context_impl.h"
#include "memory/kv_code.h"
#include "memory/kv_code_fit.h"
#include "memory/kv_row_convert.h"
#include "memory/query_window.h"
#include "memory/state_io.h"

namespace agentkv {

std::shared_ptr<const memory::KvCode> calibrate_kv_code(const Model& model, const std::vector<Token>& tokens,
                                                        const KvCalibrationParams& params) {
  const ModelConfig& cfg = model.config();
  if (cfg.n_attention_layers() == 0) throw Error("kv-calibrate: the model has no attention layers");
  if (cfg.head_dim_k != cfg.head_dim_v || cfg.head_dim_k % 32 != 0)
    throw Error("kv-calibrate: tqc3 needs K and V heads of one width, a multiple of 32 (the model has " +
                std::to_string(cfg.head_dim_k) + " / " + std::to_string(cfg.head_dim_v) + ")");
  if (params.window < 32) throw Error("kv-calibrate: windows of at least 32 positions");
  const size_t windows = std::min<size_t>(params.max_windows, tokens.size() / params.window);
  if (windows == 0)
    throw Error("kv-calibrate: " + std::to_string(tokens.size()) + " tokens, fewer than one window of " +
                std::to_string(params.window));
  std::vector<int> layers;
  for (int il = 0; il < cfg.n_layer; ++il)
    if (!cfg.is_recurrent(il)) layers.push_back(il);
  const int64_t D = cfg.head_dim_k;
  memory::KvMoments moments(layers, D, cfg.n_head, cfg.n_head_kv);
  const int64_t n_embd = cfg.n_head_kv * D;
  std::vector<float> k(static_cast<size_t>(n_embd)), v(static_cast<size_t>(n_embd));
  // Windows spread evenly over the text: one stretch of it (a table, a listing) is not the rest.
  const size_t stride = tokens.size() / windows;
  for (size_t w = 0; w < windows; ++w) {
    ContextParams cp;
    cp.n_ctx = params.window;
    cp.n_threads = params.n_threads;
    cp.kv.rotation = KvRotationMode::Off;  // the rows as the model writes them
    cp.kv.query_window = params.window;
    Context ctx(model, cp);
    const Token* first = tokens.data() + w * stride;
    for (uint32_t p0 = 0; p0 < params.window; p0 += cp.n_ubatch) {
      const uint32_t n = std::min(cp.n_ubatch, params.window - p0);
      Batch b;
      b.add_sequence(first + p0, n, static_cast<int32_t>(p0), 0, false);
      if (ctx.decode(b) != 0) throw Error("kv-calibrate: decoding a window failed");
    }
    const memory::KvCache& kv = *sequence_memory(ctx).kv();
    const memory::KvRows& rows = kv.rows();
    const memory::QueryWindow& qw = *recorded_queries(ctx);
    const uint32_t n_rows = std::min(qw.count(0), params.window);
    for (int il : layers)
      for (uint32_t i = 0; i < n_rows; ++i) {  // cell i and query i need not be one token: sums only
        rows.dequantize_k(il, 0, i, k.data());
        memory::dequantize_kv_row(kv.layout().type_v, rows.v_row(il, 0, i), v.data(), n_embd);
        moments.add(il, qw.row(il, 0, i), k.data(), v.data());
      }
  }
  return memory::fit_kv_code(moments, cfg.n_rot / 2, cfg.n_rot);
}

std::shared_ptr<const memory::KvCode> load_kv_code(const std::string& path) { return memory::KvCode::load(path); }

void save_kv_code(const memory::KvCode& code, const std::string& path) { code.save(path); }

uint64_t kv_code_id(const memory::KvCode& code) { return code.id(); }

std::string describe_kv_code(const memory::KvCode& code) {
  return std::to_string(code.layers().size()) + " layers, " + std::to_string(code.n_head_kv()) + " KV heads of " +
         std::to_string(code.head_dim()) + ", code id " + memory::hex64(code.id());
}

void check_kv_code(const memory::KvCode& code, const Model& model) {
  const ModelConfig& cfg = model.config();
  if (code.head_dim() != cfg.head_dim_k || code.head_dim() != cfg.head_dim_v || code.n_head_kv() != cfg.n_head_kv)
    throw Error("KV code: made for " + std::to_string(code.n_head_kv()) + " KV heads of " + std::to_string(code.head_dim()) +
                ", but the model has " + std::to_string(cfg.n_head_kv) + " of " + std::to_string(cfg.head_dim_k));
  for (int il = 0; il < cfg.n_layer; ++il)
    if (!cfg.is_recurrent(il) && !code.layer(il))
      throw Error("KV code: no entry for attention layer " + std::to_string(il) + " (made for another model?)");
}

}  // namespace agentkv
