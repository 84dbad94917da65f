// State blobs of a SequenceMemory: the versioned, checksummed container of docs/state-format.md
// (header with magic, version, length, model fingerprint, flags and saved sequence; framed
// sections; trailing xxh64), the memory image of a whole memory or one sequence, and restore as
// "validate everything, then change", so a rejected blob leaves memory exactly as it was.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "memory/kv_state.h"
#include "memory/recurrent_state.h"
#include "memory/sequence_memory.h"
#include "memory/state_image.h"

namespace agentkv::memory {

inline constexpr uint32_t kStateMagic = 0x53564b41;  // "AKVS" as bytes
// Version 2 adds the page chain section (PAGE); version 1 blobs are still read (and written on
// request, for peers that only read version 1).
inline constexpr uint32_t kStateVersion = 5;  // 5: KVSW (window part); 4: KVCD (KV code); 3: KVRT (KV rotation); 2: PAGE
inline constexpr uint32_t kStateOldestVersion = 1;

// Save flags (llama.cpp's llama_state_seq_flags, same bit for PARTIAL_ONLY).
enum StateFlags : uint32_t {
  kStateAll = 0,
  // Only what cannot be recomputed cheaply from the tokens: the recurrent part and the window
  // part (sliding-window layers). The main attention KV is neither saved nor touched by the
  // restore (see docs/state-format.md for the exact rules).
  kStatePartialOnly = 1,
};
inline constexpr uint32_t kStateKnownFlags = kStatePartialOnly;

constexpr uint32_t state_tag(const char (&s)[5]) {
  return static_cast<uint32_t>(static_cast<uint8_t>(s[0])) |
         static_cast<uint32_t>(static_cast<uint8_t>(s[1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[2])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[3])) << 24;
}
inline constexpr uint32_t kSectionKv = state_tag("KVCA");
inline constexpr uint32_t kSectionRecurrent = state_tag("RECR");
inline constexpr uint32_t kSectionTokens = state_tag("TOKN");
inline constexpr uint32_t kSectionLogits = state_tag("LOGT");
inline constexpr uint32_t kSectionCheckpoints = state_tag("CKPT");
inline constexpr uint32_t kSectionPages = state_tag("PAGE");
inline constexpr uint32_t kSectionKvRotation = state_tag("KVRT");
inline constexpr uint32_t kSectionKvCode = state_tag("KVCD");  // version 4: tqc3 caches
inline constexpr uint32_t kSectionWindowKv = state_tag("KVSW");  // version 5: sliding-window layers' rows
std::string state_tag_name(uint32_t tag);

// One sequence's memory (seq >= 0) or the whole memory (seq = -1), as views.
struct MemoryImage {
  SeqId seq = -1;
  uint32_t flags = kStateAll;
  std::optional<KvImage> kv;    // absent for partial saves and memories without a KV cache
  std::optional<RecImage> rec;  // absent for memories without recurrent layers
  // The window part's cells (SequenceMemory::window_kv: sliding-window layers; a sequence's image
  // holds only its kept positions); absent for memories without one. Saved with partial images too.
  std::optional<KvImage> window;
  bool per_sequence() const { return seq >= 0; }
  size_t row_bytes() const;     // K/V rows plus states
};

// Views into the live memory, valid until it changes. Throws agentkv::Error for a seq id out of
// range or unknown flags.
MemoryImage memory_state_view(const SequenceMemory& mem, SeqId seq, uint32_t flags);

// Throws agentkv::Error unless the image fits this memory: the right parts (KV and/or recurrent,
// as flags say) with the same types, widths and layers. Does not look at free room.
void check_memory_layout(const SequenceMemory& mem, const MemoryImage& image);

struct MemoryRestorePlan {
  SeqId dest = -1;
  std::optional<KvRestorePlan> kv;
  std::optional<RecRestorePlan> rec;
  std::optional<KvRestorePlan> window;
};
// Everything a restore checks, without changing anything: layout, cells, room. A sequence image
// needs dest >= 0 (any sequence, not necessarily the saved one); a whole image needs dest = -1.
MemoryRestorePlan plan_memory_restore(const SequenceMemory& mem, const MemoryImage& image, SeqId dest);
// Commits a plan made on the current state. Whole: the restored parts are cleared and refilled.
// Sequence: dest's old cells in the restored parts are removed, then the saved cells written.
void apply_memory_restore(SequenceMemory& mem, const MemoryImage& image, const MemoryRestorePlan& plan);
inline void restore_memory(SequenceMemory& mem, const MemoryImage& image, SeqId dest) {
  apply_memory_restore(mem, image, plan_memory_restore(mem, image, dest));
}

// The same image without its attention cells at positions below `first` (rows still views into
// the original's bytes): restoring a state whose first K/V are already cached pages.
MemoryImage without_kv_below(const MemoryImage& image, Pos first);
// A KV image's cells at positions >= first (rows still views into the original's bytes).
KvImage kv_image_from(const KvImage& image, Pos first);

// A checkpoint record: the memory image of a sequence at position pos (usually a partial image).
struct CheckpointImage {
  Pos pos = -1;
  MemoryImage image;
};

// Everything one blob can carry.
struct StateContents {
  uint32_t version = kStateVersion;   // as read; written as kStateVersion, or 1 when asked (no pages then)
  uint64_t fingerprint = 0;           // of the model (agentkv/session_state.h)
  MemoryImage memory;                 // header flags and seq come from here
  bool has_tokens = false;
  std::vector<int32_t> tokens;        // the sequence's tokens (or a session's), if saved
  std::vector<float> logits;          // last token's logits, empty if not saved
  std::vector<CheckpointImage> checkpoints;
  // The sequence as a page chain (version 2): tokens per page and the chained content hash of
  // every full page, as the prefix index names them (memory/prefix_index.h), so a reader finds
  // which pages it already holds. Empty when not saved.
  uint32_t page_tokens = 0;
  std::vector<uint64_t> page_hashes;
};

std::vector<uint8_t> encode_state(const StateContents& contents);
// Parses and checks a whole blob: size, magic, version, length, checksum, flags, every section's
// structure. Images are views into `blob`, which must outlive the result. `what` names the blob
// in error messages ("state", "state file a.akv"). Throws agentkv::Error.
StateContents decode_state(std::span<const uint8_t> blob, const std::string& what);

}  // namespace agentkv::memory
