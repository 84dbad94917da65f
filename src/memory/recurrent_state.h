// State save/restore of the recurrent memory (conv + delta state per cell): images of the live
// memory, their section encoding, and restore as "validate everything, then change"
// (docs/state-format.md).
#pragma once
#include <cstdint>

#include "memory/recurrent.h"
#include "memory/state_image.h"
#include "memory/state_io.h"

namespace agentkv::memory {

// The cell holding `seq`'s state (seq < 0: every used cell) with views of its states; valid
// until the memory changes. A sequence without state gives an image without cells. Throws
// agentkv::Error for a seq id out of range.
RecImage rec_state_view(const RecurrentMemory& rec, SeqId seq);

void write_rec_section(StateWriter& w, const RecImage& image);
// Parses and checks the structure; state rows are views into the reader's bytes.
RecImage read_rec_section(StateReader& r, bool per_sequence);

// Throws agentkv::Error unless the image's states fit this memory (same layers and sizes).
void check_rec_layout(const RecurrentMemory& rec, const RecImageLayout& layout);

// Whole restores (dest < 0) keep the saved cell indices; a sequence restore takes the lowest cell
// that is empty or holds only dest.
struct RecRestorePlan {
  SeqId dest = -1;
  std::vector<uint32_t> targets;  // one per image cell
};
RecRestorePlan plan_rec_restore(const RecurrentMemory& rec, const RecImage& image, SeqId dest);
// Removes dest (or clears), then writes cells and states. Does not fail for a valid plan.
void apply_rec_restore(RecurrentMemory& rec, const RecImage& image, const RecRestorePlan& plan);

}  // namespace agentkv::memory
