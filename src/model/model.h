// What runs a loaded model (agentkv/model.h): its mapped weights, the layouts of the memory it needs
// and its forward pass. One subclass per architecture (src/model/<arch>.cpp); Model::load picks it
// from general.architecture, so every Model is an ArchModel (ArchModel::of).
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agentkv/batch.h"
#include "agentkv/ggml_type.h"
#include "kernels/threadpool.h"
#include "memory/attention_view.h"
#include "memory/kv_cache.h"
#include "memory/query_window.h"
#include "memory/recurrent.h"
#include "memory/recurrent_tape.h"
#include "memory/ubatch.h"
#include "agentkv/model.h"
#include "model/config.h"
#include "model/kv_rotation.h"
#include "model/rope_spec.h"
#include "agentkv/tokenizer.h"

namespace agentkv {

namespace gguf { class Reader; }

// Scratch buffers reused across forward calls (grown on demand, never shrunk).
class Workspace {
 public:
  float* get(int slot, size_t n_floats) {
    if (slot >= static_cast<int>(bufs_.size())) bufs_.resize(slot + 1);
    if (bufs_[slot].size() < n_floats) bufs_[slot].resize(n_floats);
    return bufs_[slot].data();
  }
  // Every attention layer of a micro-batch reads the same keys, so its attention groups (keys by
  // position, masks) are built once per micro-batch, not once per layer.
  std::vector<memory::AttentionGroup> attention_groups;
  // The same for the sliding-window layers (a narrower view of the same keys).
  std::vector<memory::AttentionGroup> window_attention_groups;
  uint64_t window_groups_batch_id = 0;
  int32_t window_groups_window = 0;
  std::vector<int> tail_query_heads;  // the query heads a windowed cache's tail answers (attention_block.cpp)
  uint64_t groups_batch_id = 0;
  // One layer's K / V row pointers of the group being attended (reused, not reallocated).
  std::vector<const uint8_t*> key_k_rows, key_v_rows;

  // The KV rotation's transforms (signs drawn once, not per layer).
  const KvRotators& rotators(const memory::KvRotation& r) {
    if (!rotators_ || !(rotators_key_ == r)) {
      rotators_.emplace(r);
      rotators_key_ = r;
    }
    return *rotators_;
  }
 private:
  std::vector<std::vector<float>> bufs_;
  std::optional<KvRotators> rotators_;
  memory::KvRotation rotators_key_;
};

// The memories a forward pass reads and writes: the attention KV cache (attention layers), the
// recurrent state (Gated DeltaNet layers of hybrid models) and the window part (sliding-window
// layers, unless --swa-full); any may be absent.
struct ModelMemory {
  memory::KvCache* kv = nullptr;
  memory::RecurrentMemory* rec = nullptr;
  memory::KvCache* window_kv = nullptr;  // the sliding-window layers' rows (a window part), else null
  // Sequences in a speculative pass: their recurrent layers' inputs are recorded (null: none).
  memory::RecurrentTapes* tapes = nullptr;
};

// One micro-batch, already placed in memory.
struct ForwardBatch {
  std::span<const Token> tokens;
  const memory::UBatch* ub = nullptr;
  // Empty, or one per token (agentkv/batch.h): multi-axis rope positions, and input rows of
  // `embd` (config().n_embd_input() floats each; -1: the token's embedding). Only models that take images read them.
  std::span<const RopePos> rope;
  std::span<const int32_t> embd_row;
  const float* embd = nullptr;
  const memory::Placement* placement = nullptr;              // KV cells (attention layers)
  const memory::RecurrentPlacement* rec_placement = nullptr;  // state cells (recurrent layers)
  const memory::Placement* window_placement = nullptr;       // window part's cells (sliding-window layers)
  uint64_t id = 0;  // unique per micro-batch of a context (0: nothing may be cached across layers)
  std::span<const int> output_rows;  // indices into tokens whose logits are wanted, ascending
  float* logits = nullptr;           // output_rows.size() x n_vocab
  // Set: the output rows' final hidden states (after the output norm, llama.cpp's "result_norm"),
  // output_rows.size() x n_embd, instead of logits (embedding models).
  float* embeddings = nullptr;
  // Set: every attention layer records its query rows here (eviction scoring, agentkv/retention.h).
  memory::QueryWindow* queries = nullptr;
  // The memory's attention view of ub (memory::attention_groups), when the caller made it; null:
  // the attention layers make it once per id (every call when id is 0).
  const std::vector<memory::AttentionGroup>* attention = nullptr;
};

class ArchModel : public Model {
 public:
  ~ArchModel() override;
  // Every Model is one (Model::load makes only ArchModels).
  static const ArchModel& of(const Model& model) { return static_cast<const ArchModel&>(model); }

  const gguf::Reader& gguf() const { return *gguf_; }

  // Layout of the attention KV cache this model needs.
  memory::KvLayout kv_layout(uint32_t n_cells, uint32_t n_seq_max, bool unified, GgmlType type_k,
                             GgmlType type_v, const memory::KvRotation& rotation = {}) const;

  // Layout of the recurrent memory (hybrid models only; n_conv = n_ssm = 0 otherwise).
  memory::RecurrentLayout recurrent_layout(uint32_t n_seq_max) const;

  virtual void forward(const ForwardBatch& batch, ModelMemory& mem, Workspace& ws,
                       ThreadPool& pool) const = 0;

  // How queries and keys are rotated: NEOX over the config's rotary dims and frequencies unless
  // the architecture says otherwise (Llama: adjacent pairs and its rope_freqs tensor).
  virtual RopeSpec rope() const;
  // Layer il's rotation: rope(), with the windowed layers' own base and scale
  // (ModelConfig::rope_freq_base_swa / rope_freq_scale_swa) on a sliding-window layer.
  RopeSpec layer_rope(int il) const;
  // Context shift: whether the keys stored in the KV cache can be re-rotated to new positions
  // (seq_add / seq_div). False unless the architecture says so (llama.cpp refuses M-RoPE/IMROPE).
  virtual bool can_shift() const { return false; }
  // Recomputes the recurrent state of `cell` after the first n tokens of `tape`, from the state
  // before them (in the cell): their conv and delta-rule recurrence, exactly as the pass that
  // recorded the tape ran it. Hybrid models only (agentkv::Error otherwise).
  virtual void replay_recurrent(memory::RecurrentMemory& rec, uint32_t cell, const memory::RecurrentTape& tape,
                                int64_t n, ThreadPool& pool) const;
  // Takes input rows and multi-axis rope positions (ForwardBatch::embd_row, ::rope): image tokens.
  virtual bool takes_images() const { return false; }
  // Rotates the stored keys of every cell with a pending shift by that shift (every attention
  // layer, the first n_rot dims of each head, NEOX, this model's freq base/scale), then clears the
  // pending shifts. Only called when can_shift(). Returns the number of cells rotated. Defined
  // in model/kv_shift.cpp.
  int64_t apply_kv_shift(memory::KvCache& kv, ThreadPool& pool) const;

 protected:
  ArchModel(std::unique_ptr<gguf::Reader> gguf, ModelConfig config);
  std::unique_ptr<gguf::Reader> gguf_;
};

}  // namespace agentkv
