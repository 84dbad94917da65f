// State save/restore of the attention KV cache: images of a live cache, their section encoding,
// and restore as "validate everything, then change" (docs/state-format.md).
#pragma once
#include <vector>

#include "memory/kv_cache.h"
#include "memory/state_image.h"
#include "memory/state_io.h"

namespace agentkv::memory {

// The cells of `seq` (seq < 0: every used cell of every stream) with views of their rows in the
// live cache; valid until the cache changes. Throws agentkv::Error for a seq id out of range.
KvImage kv_state_view(const KvCache& kv, SeqId seq);

// Section payload (docs/state-format.md, "KV section").
void write_kv_section(StateWriter& w, const KvImage& image);
// Parses and checks the structure (known types, block-exact row sizes, ranges inside the saving
// layout, cells in order); rows are views into the reader's bytes. Throws agentkv::Error.
KvImage read_kv_section(StateReader& r, bool per_sequence);
// The KV rotation a KV section's rows were stored under (written beside it only when active).
void write_kv_rotation_section(StateWriter& w, const KvRotation& rot);
KvRotation read_kv_rotation_section(StateReader& r);
// The KV code section: the id of the calibrated code tqc3 rows were written under.
void write_kv_code_section(StateWriter& w, uint64_t code_id);
uint64_t read_kv_code_section(StateReader& r);

// Throws agentkv::Error unless the image's rows fit this cache: same K/V types and widths, same
// KV layers.
void check_kv_layout(const KvCache& kv, const KvImageLayout& layout);

// Where every image cell goes. Whole restores (dest < 0) keep the saved cell indices; sequence
// restores take the lowest cells of dest's stream that are empty or hold only dest (those are
// free once dest's old cells are removed), so a fragmented cache is fine.
struct KvRestorePlan {
  SeqId dest = -1;
  std::vector<CellRef> targets;  // one per image cell
};
// Checks layout, cells and room; throws agentkv::Error and changes nothing when the image cannot
// be restored.
KvRestorePlan plan_kv_restore(const KvCache& kv, const KvImage& image, SeqId dest);
// Commits a plan made on the cache's current state: removes dest (or clears the cache), then
// writes cells and rows. Does not fail for a valid plan.
void apply_kv_restore(KvCache& kv, const KvImage& image, const KvRestorePlan& plan);

}  // namespace agentkv::memory
