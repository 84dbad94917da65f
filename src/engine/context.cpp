#include "engine/context_impl.h"
#include "engine/recurrent_pass.h"

#include <algorithm>
#include <map>
#include <string>

#include "agentkv/error.h"
#include "agentkv/fake_prefix.h"
#include "agentkv/kv_code.h"
#include "agentkv/retrieval_heads.h"
#include "agentkv/seq_snapshot.h"
#include "memory/attention_view.h"
#include "memory/kv_row_rotation.h"
#include "memory/memory_state.h"
#include "memory/tiered_prefix_cache.h"
#include "memory/window_kv.h"

namespace agentkv {

Context::Context(const Model& model, const ContextParams& params) : impl_(std::make_unique<Impl>(model, params)) {}

namespace {
// Sliding-window layers keep only their window (llama.cpp's default; --swa-full keeps every row).
bool keeps_only_window(const ModelConfig& cfg, const ContextParams& params) {
  if (params.kv.swa_full || cfg.n_swa <= 0) return false;
  bool any = false;
  for (int il = 0; il < cfg.n_layer; ++il) any = any || (cfg.is_swa(il) && !cfg.is_recurrent(il));
  return any && static_cast<uint32_t>(cfg.n_swa) < params.n_ctx;
}

// The window part takes the sliding-window layers out of `layout` (the main cache's) into a cache
// of their own, sized for every sequence's window: same types, rotation and code, no hot window.
std::unique_ptr<memory::WindowKv> make_window_part(const ModelConfig& cfg, const ContextParams& params,
                                                   memory::KvLayout& layout) {
  memory::KvLayout w = layout;
  for (int il = 0; il < cfg.n_layer; ++il) {
    const bool swa = cfg.is_swa(il) && layout.layer_has_kv[static_cast<size_t>(il)];
    w.layer_has_kv[static_cast<size_t>(il)] = swa;
    if (swa) layout.layer_has_kv[static_cast<size_t>(il)] = false;
  }
  const uint32_t needed = memory::WindowKv::cells_needed(cfg.n_swa, params.n_seq_max, params.kv.unified, params.n_ubatch);
  // Room for cached pages' window rows (--swa-cache): what the budget buys, at most a context's.
  const auto layers = static_cast<size_t>(std::count(w.layer_has_kv.begin(), w.layer_has_kv.end(), true));
  const size_t per_cell = layers * (ggml_row_size(w.type_k, w.n_embd_k) + ggml_row_size(w.type_v, w.n_embd_v));
  uint64_t cached = 0;
  if (w.unified && per_cell > 0)
    cached = std::min<uint64_t>(params.kv.swa_cache_bytes / per_cell, params.n_ctx) / memory::KvCache::kNKvPad *
             memory::KvCache::kNKvPad;
  w.n_cells = static_cast<uint32_t>(std::min<uint64_t>(needed + cached, UINT32_MAX));
  w.hot_cells = 0;
  w.tail_dir.clear();
  w.tail_heads.clear();
  return std::make_unique<memory::WindowKv>(std::make_unique<memory::KvCache>(w), cfg.n_swa,
                                            static_cast<uint32_t>(w.n_cells - needed));
}
}  // namespace

Context::Impl::Impl(const Model& model_in, const ContextParams& params_in)
    : model(ArchModel::of(model_in)), params(params_in), pool(params_in.n_threads) {
  if (params.n_seq_max < 1 || params.n_seq_max > memory::kMaxSeq)
    throw Error("n_seq_max must be in [1, " + std::to_string(memory::kMaxSeq) + "]");
  if (params.n_ubatch < 1) throw Error("n_ubatch must be positive");
  const auto& cfg = model.config();
  std::unique_ptr<memory::KvCache> kv;
  std::unique_ptr<memory::RecurrentMemory> rec;
  std::unique_ptr<memory::WindowKv> window;
  const bool windowed = params.kv.hot_cells > 0 && params.kv.hot_cells < params.n_ctx;
  if (windowed && params.kv.hot_cells < params.n_ubatch)
    throw Error("kv hot cells (" + std::to_string(params.kv.hot_cells) + ") must be at least n_ubatch (" +
                std::to_string(params.n_ubatch) + "): a micro-batch's rows are written hot");
  if (cfg.n_attention_layers() > 0) {
    // Hot and tail rows share one rotation: rotated when either type is quantized.
    auto rotation_type = [&](GgmlType hot, GgmlType tail) {
      return windowed && !ggml_type_info(hot).quantized ? tail : hot;
    };
    memory::KvLayout layout = model.kv_layout(
        params.n_ctx, params.n_seq_max, params.kv.unified, params.kv.type_k, params.kv.type_v,
        choose_kv_rotation(cfg, rotation_type(params.kv.type_k, params.kv.tail_type_k),
                           rotation_type(params.kv.type_v, params.kv.tail_type_v), params.kv.rotation,
                           params.kv.rotation_seed));
    const bool coded = params.kv.type_k == GgmlType::TQC3 || params.kv.type_v == GgmlType::TQC3;
    if (coded) {
      if (!params.kv.code)
        throw Error("KV type tqc3 needs a calibrated KV code (--kv-code FILE, made by `agentkv kv-calibrate`)");
      check_kv_code(*params.kv.code, model_in);
      layout.code = params.kv.code;
    }
    if (windowed) {
      layout.hot_cells = params.kv.hot_cells;
      layout.tail_type_k = params.kv.tail_type_k;
      layout.tail_type_v = params.kv.tail_type_v;
      layout.tail_dir = params.kv.tail_dir;
      if (!params.kv.tail_heads.empty() || params.kv.retrieval_heads < 1.0) {
        layout.tail_heads = !params.kv.tail_heads.empty()
                                ? params.kv.tail_heads
                                : top_retrieval_heads(find_retrieval_heads(model_in, params.n_threads), params.kv.retrieval_heads);
        layout.n_head_kv = static_cast<uint32_t>(cfg.n_head_kv);
      }
    } else if (!params.kv.tail_heads.empty() || params.kv.retrieval_heads < 1.0) {
      throw Error("retrieval heads (--kv-retrieval-heads) keep a tail's rows: they need a window (--kv-hot below the context)");
    }
    if (keeps_only_window(cfg, params)) window = make_window_part(cfg, params, layout);
    kv = std::make_unique<memory::KvCache>(layout);
  }
  if (cfg.is_hybrid()) rec = std::make_unique<memory::RecurrentMemory>(model.recurrent_layout(params.n_seq_max));
  memory = std::make_unique<memory::SequenceMemory>(std::move(kv), std::move(rec), std::move(window));
  memory->set_shift_supported(model.can_shift());
  if (params.kv.query_window > 0 && memory->kv())
    queries = std::make_unique<memory::QueryWindow>(memory->kv()->layout().layer_has_kv,
                                                    static_cast<int64_t>(cfg.n_head) * cfg.head_dim_k, params.n_seq_max,
                                                    params.kv.query_window);
}

void Context::apply_pending_shift() {
  for (memory::KvCache* kv : {impl_->memory->kv(), memory::window_kv_of(*impl_->memory)}) {
    if (!kv || !kv->has_shift()) continue;
    // A pending shift can only come from seq_add / seq_div, which SequenceMemory refuses unless the
    // model can re-rotate keys; a caller that shifted the KvCache directly must not reach here.
    if (!impl_->model.can_shift()) throw Error("context shift pending but this model cannot re-rotate stored keys");
    impl_->stats.n_shifted_cells += impl_->model.apply_kv_shift(*kv, impl_->pool);
  }
}

void Context::Impl::count_keys_attended(const memory::UBatch& ub) {
  if (!memory->kv() || ub.size() == 0) return;
  const std::vector<int64_t> seen = memory::keys_seen(attention, ub.size());
  for (int64_t n : seen) stats.n_keys_attended += n;
  stats.last_keys_attended = seen.back();
}

Context::~Context() = default;

uint32_t kv_cells_for_bytes(const Model& model, const ContextParams& params, size_t bytes) {
  const memory::KvLayout l = ArchModel::of(model).kv_layout(1, 1, true, params.kv.type_k, params.kv.type_v);
  size_t n_layers = static_cast<size_t>(std::count(l.layer_has_kv.begin(), l.layer_has_kv.end(), true));
  const ModelConfig& cfg = model.config();
  if (keeps_only_window(cfg, params))  // a main cell holds the full-attention layers' rows only
    for (int il = 0; il < cfg.n_layer; ++il) n_layers -= l.layer_has_kv[static_cast<size_t>(il)] && cfg.is_swa(il) ? 1 : 0;
  const size_t per_cell = n_layers * (ggml_row_size(l.type_k, l.n_embd_k) + ggml_row_size(l.type_v, l.n_embd_v));
  if (per_cell == 0 || bytes == 0) return 0;
  return static_cast<uint32_t>(std::min<size_t>(bytes / per_cell, (1u << 24)));
}

PrefixCache* Context::enable_prefix_cache(const PrefixCacheConfig& cfg) {
  if (impl_->prefix_cache) return impl_->prefix_cache.get();
  const memory::KvCache* kv = impl_->memory->kv();
  if (!kv || kv->layout().n_streams() != 1) return nullptr;
  if (cfg.holder < 0 || static_cast<uint32_t>(cfg.holder) >= impl_->params.n_seq_max)
    throw Error("prefix cache: holder sequence " + std::to_string(cfg.holder) + " outside n_seq_max " +
                std::to_string(impl_->params.n_seq_max));
  PrefixCacheConfig ic = cfg;
  const memory::KvLayout& kl = kv->layout();
  // Pages name what their rows hold: the model, the KV types and the rotation they are stored under.
  ic.model_fingerprint = cfg.model_fingerprint ^ (static_cast<uint64_t>(kl.type_k) << 48) ^
                   (static_cast<uint64_t>(kl.type_v) << 56) ^
                   (kl.rotation.active() ? (kl.rotation.seed * 0x9e3779b97f4a7c15ull) ^
                                               (static_cast<uint64_t>(kl.rotation.k_block) << 20) ^
                                               (static_cast<uint64_t>(kl.rotation.v_block) << 34) ^ 1
                                         : 0) ^
                   (kl.code ? kl.code->id() * 0xc2b2ae3d27d4eb4full : 0);
  memory::PrefixIndex* existing = memory::prefix_index_of(*impl_->memory);
  memory::PrefixIndex& index = existing ? *existing : memory::enable_prefix_index(*impl_->memory, ic);
  impl_->prefix_cache = std::make_unique<memory::TieredPrefixCache>(*impl_->memory, index);
  return impl_->prefix_cache.get();
}

size_t Context::cells_free_for(MemorySeqId seq) const {
  const memory::KvCache* kv = impl_->memory->kv();
  if (!kv) return SIZE_MAX;  // recurrent memory only: one cell per sequence, always there
  kv->layout().check_seq(seq, "cells_free_for");
  return memory::cells_free_for(kv->cells(kv->layout().stream_of(seq)), seq);
}

size_t Context::memory_bytes() const {
  // The recurrent states from their (per-sequence) view; the K/V rows from the residency counts,
  // not from a state view, which lists every used cell: the server asks after every task, and a
  // pool of 100 k cached pages made that 0.3 s. A windowed cache's rows are counted as stored
  // (tail rows in the tail type).
  const size_t n = memory::memory_state_view(*impl_->memory, -1, memory::kStatePartialOnly).row_bytes();
  const memory::KvCache* kv = impl_->memory->kv();
  return kv ? n + kv->rows().bytes(kv->window().residency()).held : n;
}

void Context::Impl::validate(const Batch& b) const {
  if (b.pos.size() != b.size() || b.seq.size() != b.size() || b.output.size() != b.size())
    throw Error("batch arrays have different lengths");
  const int64_t n_vocab = model.n_vocab();
  if (!b.rope.empty() || !b.embd_row.empty()) {
    if (!model.takes_images())
      throw Error(std::string("the ") + arch_name(model.config().arch) + " model takes no image input");
    if ((!b.rope.empty() && b.rope.size() != b.size()) || (!b.embd_row.empty() && b.embd_row.size() != b.size()))
      throw Error("batch arrays have different lengths");
  }
  const int64_t n_embd_rows = static_cast<int64_t>(b.embd.size()) / model.n_embd_input();
  // Per sequence, the batch's tokens must continue the sequence at pos_max+1 without gaps.
  std::map<memory::SeqId, memory::Pos> next;
  for (size_t i = 0; i < b.size(); ++i) {
    const bool has_row = !b.embd_row.empty() && b.embd_row[i] >= 0;
    if (has_row && b.embd_row[i] >= n_embd_rows)
      throw Error("batch token " + std::to_string(i) + ": input row " + std::to_string(b.embd_row[i]) + " out of range");
    if (!has_row && (b.tokens[i] < 0 || b.tokens[i] >= n_vocab))
      throw Error("token id " + std::to_string(b.tokens[i]) + " out of range [0, " + std::to_string(n_vocab) + ")");
    if (b.seq[i].empty()) throw Error("batch token " + std::to_string(i) + " has no sequence");
    if (memory->rec() && b.seq[i].size() != 1)
      throw Error("batch token " + std::to_string(i) + ": a recurrent model's token belongs to exactly one sequence");
    for (memory::SeqId s : b.seq[i]) {
      if (s < 0 || s >= static_cast<memory::SeqId>(params.n_seq_max))
        throw Error("sequence id " + std::to_string(s) + " out of range [0, " + std::to_string(params.n_seq_max) + ")");
      auto it = next.find(s);
      const memory::Pos expected = it != next.end() ? it->second : memory->seq_pos_max(s) + 1;
      if (b.pos[i] != expected)
        throw Error("sequence " + std::to_string(s) + ": token at position " + std::to_string(b.pos[i]) +
                    " but the sequence continues at " + std::to_string(expected));
      next[s] = expected + 1;
    }
  }
}

int Context::decode(const Batch& b) {
  impl_->validate(b);
  apply_pending_shift();
  const int64_t n_vocab = impl_->model.n_vocab();
  impl_->output_index.clear();
  size_t n_out = 0;
  for (bool o : b.output) n_out += o ? 1 : 0;
  const int64_t n_embd = impl_->model.n_embd();
  if (impl_->params.embeddings) impl_->embeddings.resize(n_out * n_embd);
  else impl_->logits.resize(n_out * n_vocab);

  ModelMemory mem;
  mem.kv = impl_->memory->kv();
  mem.rec = impl_->memory->rec();
  mem.window_kv = memory::window_kv_of(*impl_->memory);
  if (!impl_->tapes.empty()) mem.tapes = &impl_->tapes;
  size_t out_base = 0;
  for (size_t start = 0; start < b.size(); start += impl_->params.n_ubatch) {
    const size_t end = std::min(b.size(), start + impl_->params.n_ubatch);
    memory::UBatch ub;
    std::vector<int> out_rows;
    for (size_t i = start; i < end; ++i) {
      ub.add(b.pos[i], b.seq[i]);
      if (b.output[i]) out_rows.push_back(static_cast<int>(i - start));
    }
    auto placement = impl_->memory->prepare(ub);
    if (!placement) return 1;
    impl_->memory->apply(ub, *placement);
    // The attention view, once per micro-batch for every attention layer (and the key count).
    if (impl_->memory->kv()) memory::attention_groups(*impl_->memory->kv(), ub, impl_->attention);
    impl_->count_keys_attended(ub);

    ForwardBatch fb;
    fb.tokens = std::span<const Token>(b.tokens.data() + start, end - start);
    fb.ub = &ub;
    if (!b.rope.empty()) fb.rope = std::span<const RopePos>(b.rope.data() + start, end - start);
    if (!b.embd_row.empty()) fb.embd_row = std::span<const int32_t>(b.embd_row.data() + start, end - start);
    fb.embd = b.embd.data();
    fb.id = ++impl_->next_ubatch_id;
    fb.placement = &placement->kv;
    fb.rec_placement = &placement->rec;
    fb.window_placement = &placement->window;
    fb.output_rows = out_rows;
    fb.queries = impl_->queries.get();
    if (impl_->memory->kv()) fb.attention = &impl_->attention;
    if (impl_->params.embeddings) fb.embeddings = impl_->embeddings.data() + out_base * n_embd;
    else fb.logits = impl_->logits.data() + out_base * n_vocab;
    impl_->model.forward(fb, mem, impl_->ws, impl_->pool);
    for (int r : out_rows) impl_->output_index.push_back(static_cast<int>(start) + r);
    out_base += out_rows.size();
    impl_->stats.n_tokens += static_cast<int64_t>(end - start);
    impl_->stats.n_ubatches += 1;
  }
  return 0;
}

const float* Context::embeddings(int i) const {
  if (!impl_->params.embeddings || i < 0 || i >= n_outputs()) throw Error("no embedding for output " + std::to_string(i));
  return impl_->embeddings.data() + static_cast<size_t>(i) * impl_->model.n_embd();
}

const float* Context::logits(int i) const {
  if (impl_->params.embeddings || i < 0 || i >= n_outputs()) throw Error("no logits for output " + std::to_string(i));
  return impl_->logits.data() + static_cast<size_t>(i) * impl_->model.n_vocab();
}

const Model& Context::model() const { return impl_->model; }
const ContextParams& Context::params() const { return impl_->params; }
MemoryInterface& Context::memory() { return *impl_->memory; }
const MemoryInterface& Context::memory() const { return *impl_->memory; }
int Context::n_outputs() const { return static_cast<int>(impl_->output_index.size()); }
bool Context::can_shift() const { return impl_->memory->can_shift(); }
std::unique_ptr<RequestMemory> Context::open_request_memory(const RequestMemoryConfig& cfg,
                                                            std::function<void(MemorySeqId, const std::string&)> log) {
  if (cfg.n_seqs < 1 || static_cast<uint32_t>(cfg.n_seqs) > impl_->params.n_seq_max)
    throw Error("request memory: " + std::to_string(cfg.n_seqs) + " sequences need a context with as many (n_seq_max " +
                std::to_string(impl_->params.n_seq_max) + ")");
  RequestMemoryHooks hooks;
  hooks.memory = &memory();
  if (impl_->params.n_seq_max > static_cast<uint32_t>(cfg.n_seqs)) {
    PrefixCacheConfig pc;
    pc.page_tokens = cfg.page_tokens;
    pc.holder = cfg.n_seqs;  // the first sequence no request uses
    pc.model_fingerprint = cfg.model_fingerprint;
    pc.snapshot_bytes = cfg.snapshot_bytes;
    hooks.cache = enable_prefix_cache(pc);  // null without a unified KV cache
  }
  hooks.needs_snapshots = needs_snapshots();
  hooks.cells_free_for = [this](MemorySeqId seq) { return cells_free_for(seq); };
  hooks.fake_prefix = [this](MemorySeqId seq, MemoryPos n) { agentkv::seq_fake_prefix(*this, seq, n); };
  hooks.log = std::move(log);
  if (model().config().is_hybrid())  // a recurrent state cannot drop a suffix (a window part can, up to 32 positions)
    hooks.recurrent_pass = [this](MemorySeqId seq) {
      auto before = std::make_shared<SeqSnapshot>(begin_recurrent_pass(*this, seq));
      return std::function<bool(size_t)>([this, before, seq](size_t accepted) { return end_recurrent_pass(*this, seq, *before, accepted); });
    };
  return std::make_unique<RequestMemory>(std::move(hooks), cfg);
}

bool Context::needs_snapshots() const { return impl_->memory->needs_snapshots(); }
uint32_t Context::queries_recorded(MemorySeqId seq) const {
  return impl_->queries ? impl_->queries->count(seq) : 0;
}
const DecodeStats& Context::stats() const { return impl_->stats; }
void Context::reset_stats() { impl_->stats = {}; }

}  // namespace agentkv
