// Context-level state save/restore (llama_state_seq_* / llama_state_* equivalents): one
// sequence, or the whole memory, as a versioned blob (docs/state-format.md) carrying the model
// fingerprint, the memory image, optionally the sequence's tokens, the last token's logits (so a
// restored sequence samples its next token without recomputing anything) and checkpoints.
// Loading validates the whole blob against this context before it changes anything: a truncated,
// corrupt or foreign blob (other model, KV type, layout) is an agentkv::Error and memory stays
// exactly as it was.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agentkv/context.h"
#include "agentkv/memory.h"
#include "agentkv/seq_snapshot.h"

namespace agentkv {

// xxh64 of what makes two models' states interchangeable: architecture, hyperparameters, and the
// tensor table (names, types, shapes) plus the first bytes of every tensor's data (so two
// fine-tunes of one shape differ). Cheap: no full pass over the weights.
uint64_t model_fingerprint(const Model& model);

// SaveOptions::flags (llama.cpp's llama_state_seq_flags, same bit): only what cannot be recomputed
// cheaply from the tokens, the recurrent part (docs/state-format.md).
inline constexpr uint32_t kSavePartialOnly = 1;

// A recurrent snapshot to carry in a state blob as the checkpoint at pos.
struct SnapshotAt {
  MemoryPos pos = -1;
  const SeqSnapshot* snapshot = nullptr;  // must outlive the save
};

struct SaveOptions {
  uint32_t flags = 0;                  // 0: everything; or kSavePartialOnly
  bool with_tokens = false;
  std::span<const Token> tokens;       // the sequence's tokens (whole saves: any token list)
  std::span<const float> logits;       // n_vocab floats of the last token, or empty
  // Checkpoints to carry along, in position order.
  std::vector<SnapshotAt> checkpoints;
  // Hybrid models: also carry the recurrent snapshots the context's prefix cache holds along
  // `tokens`' page chain under this salt (after `checkpoints`).
  std::optional<uint64_t> snapshots_salt;
};

struct LoadedCheckpoint {
  MemoryPos pos = -1;
  SeqSnapshot snapshot;
};

// What a load hands back besides the restored memory.
struct LoadedState {
  MemorySeqId saved_seq = -1;  // the sequence the blob was saved from (-1: whole memory)
  uint32_t flags = 0;            // as saved (SaveOptions::flags)
  bool has_tokens = false;
  std::vector<Token> tokens;
  std::vector<float> logits;     // empty when the blob carried none
  std::vector<LoadedCheckpoint> checkpoints;
  size_t n_shared = 0;           // leading tokens whose K/V came from cached pages, not the blob
};

// One sequence (seq >= 0) or the whole memory. Throws agentkv::Error for a bad seq id, logits of
// the wrong size, or tokens outside the vocabulary.
std::vector<uint8_t> save_seq(const Context& ctx, MemorySeqId seq, const SaveOptions& options = {});
std::vector<uint8_t> save_all(const Context& ctx, const SaveOptions& options = {});

// Restores a sequence blob into dest (any sequence id, the cache may be fragmented) or a whole
// blob into the whole memory. `what` names the blob in error messages. With `share_salt` and a
// memory that has a prefix index, the leading tokens whose pages are cached (under that salt)
// attach those pages instead of taking the blob's rows (LoadedState::n_shared): the blob's K/V
// are restored only from there on, and its recurrent state as saved.
LoadedState load_seq(Context& ctx, std::span<const uint8_t> blob, MemorySeqId dest,
                     const std::string& what = "state", std::optional<uint64_t> share_salt = std::nullopt);
LoadedState load_all(Context& ctx, std::span<const uint8_t> blob, const std::string& what = "state");

// Hybrid models: the checkpoints a load handed back become recurrent snapshots in the context's
// prefix cache, on the chain of `tokens` (the restored sequence's, published first) under `salt`.
// Returns how many were taken (0 without a prefix cache or a recurrent state).
size_t adopt_checkpoints(Context& ctx, std::span<const Token> tokens, uint64_t salt,
                         std::vector<LoadedCheckpoint> checkpoints);

// Whether these are the first bytes of a state blob (its magic number), for telling state files
// from other files without reading them whole.
bool starts_like_state(std::span<const uint8_t> first_bytes);

// What a blob holds, without loading it (the whole blob is validated first: length, checksum,
// every section). Throws agentkv::Error for a blob that is no state; `what` names it.
struct StateSummary {
  bool has_tokens = false;
  size_t kv_cells = 0;       // KV cells a restore needs
  uint64_t fingerprint = 0;  // of the model that saved it (model_fingerprint)
  // In words, for `agentkv state info`: format version, fingerprint, sequence or whole memory,
  // KV layout and cell ranges, recurrent cells, tokens, logits, checkpoints; lines end in '\n'.
  std::string description;
};
StateSummary summarize_state(std::span<const uint8_t> blob, const std::string& what = "state");

// Files: the blob as is. Writing goes through a temporary file and a rename, so a crash never
// leaves half a state under the final name.
void write_state_file(const std::string& path, std::span<const uint8_t> blob);
std::vector<uint8_t> read_state_file(const std::string& path);

}  // namespace agentkv
