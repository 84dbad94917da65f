#include "memory/memory_state.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "agentkv/error.h"

namespace agentkv::memory {
namespace {

// magic, version, total length, fingerprint, flags, seq
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 8 + 4 + 4;
constexpr size_t kChecksumBytes = 8;

// Writes "u32 count, then (u32 tag, u64 length, payload) per section".
class SectionListWriter {
 public:
  explicit SectionListWriter(StateWriter& w) : w_(w), count_at_(w.placeholder_u32()) {}
  template <typename F>
  void add(uint32_t tag, F&& write_payload) {
    w_.u32(tag);
    const size_t len_at = w_.placeholder_u64();
    const size_t start = w_.size();
    write_payload(w_);
    w_.patch_u64(len_at, w_.size() - start);
    ++count_;
  }
  void finish() { w_.patch_u32(count_at_, count_); }

 private:
  StateWriter& w_;
  size_t count_at_;
  uint32_t count_ = 0;
};

struct Section {
  uint32_t tag;
  StateReader body;
};

// Reads a section list; every tag must be one of `allowed` and appear at most once.
std::vector<Section> read_section_list(StateReader& r, const std::vector<uint32_t>& allowed,
                                       const std::string& where) {
  const uint32_t n = r.u32(where + ": section count");
  if (n > allowed.size()) r.fail(where + ": " + std::to_string(n) + " sections (at most " +
                                 std::to_string(allowed.size()) + " exist)");
  std::vector<Section> out;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t tag = r.u32(where + ": section tag");
    if (std::find(allowed.begin(), allowed.end(), tag) == allowed.end())
      r.fail(where + ": unexpected section '" + state_tag_name(tag) + "'");
    for (const Section& s : out)
      if (s.tag == tag) r.fail(where + ": section '" + state_tag_name(tag) + "' appears twice");
    const uint64_t len = r.u64(where + ": section length");
    out.push_back(Section{tag, r.sub(len, where + ": section '" + state_tag_name(tag) + "'")});
  }
  return out;
}

StateReader* find_section(std::vector<Section>& sections, uint32_t tag) {
  for (Section& s : sections)
    if (s.tag == tag) return &s.body;
  return nullptr;
}

void write_image_sections(SectionListWriter& list, const MemoryImage& img) {
  if (img.kv) list.add(kSectionKv, [&](StateWriter& w) { write_kv_section(w, *img.kv); });
  // The rotation and the code hold for both KV parts (the window part is stored as the main one).
  const KvImage* any_kv = img.kv ? &*img.kv : img.window ? &*img.window : nullptr;
  if (any_kv && any_kv->layout.rotation.active())
    list.add(kSectionKvRotation, [&](StateWriter& w) { write_kv_rotation_section(w, any_kv->layout.rotation); });
  if (any_kv && any_kv->layout.code_id != 0)
    list.add(kSectionKvCode, [&](StateWriter& w) { write_kv_code_section(w, any_kv->layout.code_id); });
  if (img.rec) list.add(kSectionRecurrent, [&](StateWriter& w) { write_rec_section(w, *img.rec); });
  if (img.window) list.add(kSectionWindowKv, [&](StateWriter& w) { write_kv_section(w, *img.window); });
}

void check_header_fields(StateReader& r, SeqId seq, uint32_t flags, const std::string& where) {
  if (flags & ~kStateKnownFlags) {
    char hex[11];
    std::snprintf(hex, sizeof hex, "0x%x", flags);
    r.fail(where + ": unknown flags " + hex);
  }
  if (seq < -1 || seq >= kMaxSeq) r.fail(where + ": saved sequence id " + std::to_string(seq) + " is invalid");
}

MemoryImage image_from_sections(std::vector<Section>& sections, SeqId seq, uint32_t flags,
                                StateReader& r, const std::string& where) {
  MemoryImage img;
  img.seq = seq;
  img.flags = flags;
  if (StateReader* kv = find_section(sections, kSectionKv)) {
    if (flags & kStatePartialOnly) r.fail(where + ": a partial state carries a KV section");
    img.kv = read_kv_section(*kv, seq >= 0);
  }
  if (StateReader* window = find_section(sections, kSectionWindowKv)) img.window = read_kv_section(*window, seq >= 0);
  StateReader* rot = find_section(sections, kSectionKvRotation);
  StateReader* code = find_section(sections, kSectionKvCode);
  if ((rot || code) && !img.kv && !img.window) r.fail(where + ": a KV rotation or code section without a KV section");
  const KvRotation rotation = rot ? read_kv_rotation_section(*rot) : KvRotation{};
  const uint64_t code_id = code ? read_kv_code_section(*code) : 0;
  for (std::optional<KvImage>* part : {&img.kv, &img.window})
    if (*part) {
      if (rot) (*part)->layout.rotation = rotation;
      if (code) (*part)->layout.code_id = code_id;
    }
  if (StateReader* rec = find_section(sections, kSectionRecurrent)) img.rec = read_rec_section(*rec, seq >= 0);
  return img;
}

// Sequence ids of the memory are [0, n_seq_max); seq = -1 means the whole memory.
void check_seq_id(const SequenceMemory& mem, SeqId seq, const char* what) {
  const uint32_t n_seq_max = mem.kv() ? mem.kv()->layout().n_seq_max : mem.rec() ? mem.rec()->layout().n_seq_max : 0;
  if (seq < -1 || (seq >= 0 && static_cast<uint32_t>(seq) >= n_seq_max))
    throw Error(std::string("state: ") + what + " " + std::to_string(seq) + " outside [0, " +
                std::to_string(n_seq_max) + ")");
}

}  // namespace

std::string state_tag_name(uint32_t tag) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const char c = static_cast<char>((tag >> (8 * i)) & 0xff);
    s += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return s;
}

size_t MemoryImage::row_bytes() const {
  size_t n = 0;
  if (kv)
    for (size_t l = 0; l < kv->k.size(); ++l) n += kv->k[l].total_bytes() + kv->v[l].total_bytes();
  if (rec)
    for (size_t l = 0; l < rec->conv.size(); ++l) n += rec->conv[l].total_bytes() + rec->ssm[l].total_bytes();
  if (window)
    for (size_t l = 0; l < window->k.size(); ++l) n += window->k[l].total_bytes() + window->v[l].total_bytes();
  return n;
}

MemoryImage memory_state_view(const SequenceMemory& mem, SeqId seq, uint32_t flags) {
  if (flags & ~kStateKnownFlags) throw Error("state: unknown save flags " + std::to_string(flags));
  check_seq_id(mem, seq, "sequence id");
  MemoryImage img;
  img.seq = seq;
  img.flags = flags;
  if (mem.kv() && !(flags & kStatePartialOnly)) img.kv = kv_state_view(*mem.kv(), seq);
  if (mem.rec()) img.rec = rec_state_view(*mem.rec(), seq);
  if (const WindowKv* w = mem.window()) {
    KvImage view = kv_state_view(w->kv(), seq);
    // A sequence's image holds only the positions it keeps from now on (the last micro-batch's
    // pruning left those before it).
    const Pos end = seq >= 0 ? w->kv().seq_pos_max(seq) + 1 : 0;
    if (seq >= 0 && end > w->keep()) {
      KvImage kept = kv_image_from(view, end - w->keep());
      kept.owned = std::move(view.owned);  // moving the vectors keeps the views valid
      img.window = std::move(kept);
    } else {
      img.window = std::move(view);
    }
  }
  return img;
}

void check_memory_layout(const SequenceMemory& mem, const MemoryImage& img) {
  const bool partial = img.flags & kStatePartialOnly;
  const bool want_kv = mem.kv() && !partial;
  if (want_kv != img.kv.has_value())
    throw Error(img.kv ? "state: the state has an attention KV part but this memory has no KV cache"
                       : "state: the state has no attention KV part but this memory needs one");
  if ((mem.rec() != nullptr) != img.rec.has_value())
    throw Error(img.rec ? "state: the state has a recurrent part but this memory has none (not a hybrid model)"
                        : "state: the state has no recurrent part but this memory needs one (hybrid model)");
  if ((mem.window() != nullptr) != img.window.has_value())
    throw Error(img.window ? "state: the state has a sliding-window part but this memory keeps every row of its "
                             "windowed layers (--swa-full) or has none"
                           : "state: the state has no sliding-window part but this memory keeps one (saved with "
                             "--swa-full, or by another model)");
  if (img.kv) check_kv_layout(*mem.kv(), img.kv->layout);
  if (img.rec) check_rec_layout(*mem.rec(), img.rec->layout);
  if (img.window) check_kv_layout(*window_kv_of(mem), img.window->layout);
}

MemoryRestorePlan plan_memory_restore(const SequenceMemory& mem, const MemoryImage& img, SeqId dest) {
  if (img.per_sequence() && dest < 0)
    throw Error("state: the state holds sequence " + std::to_string(img.seq) +
                "; restoring it needs a destination sequence");
  if (!img.per_sequence() && dest >= 0)
    throw Error("state: the state holds the whole memory, not one sequence");
  check_seq_id(mem, dest, "destination sequence");
  check_memory_layout(mem, img);
  MemoryRestorePlan plan;
  plan.dest = dest;
  if (img.kv) plan.kv = plan_kv_restore(*mem.kv(), *img.kv, dest);
  if (img.rec) plan.rec = plan_rec_restore(*mem.rec(), *img.rec, dest);
  if (img.window) plan.window = plan_kv_restore(*window_kv_of(mem), *img.window, dest);
  return plan;
}

void apply_memory_restore(SequenceMemory& mem, const MemoryImage& img, const MemoryRestorePlan& plan) {
  if (plan.kv) apply_kv_restore(*mem.kv(), *img.kv, *plan.kv);
  if (plan.rec) apply_rec_restore(*mem.rec(), *img.rec, *plan.rec);
  if (plan.window) apply_kv_restore(*window_kv_of(mem), *img.window, *plan.window);
}

KvImage kv_image_from(const KvImage& in, Pos first) {
  KvImage kv;
  kv.layout = in.layout;
  std::vector<bool> keep(in.cells.size());
  for (size_t i = 0; i < in.cells.size(); ++i) {
    keep[i] = in.cells[i].pos >= first;
    if (keep[i]) kv.cells.push_back(in.cells[i]);
  }
  auto filter = [&](const RowChunks& rows, size_t row_bytes) {
    RowChunks kept;
    RowCursor cursor(rows, row_bytes);
    for (size_t i = 0; i < in.cells.size(); ++i) {
      const uint8_t* row = cursor.next();
      if (keep[i]) kept.chunks.emplace_back(row, row_bytes);
    }
    return kept;
  };
  for (size_t l = 0; l < in.k.size(); ++l) {
    kv.k.push_back(filter(in.k[l], in.layout.row_bytes_k()));
    kv.v.push_back(filter(in.v[l], in.layout.row_bytes_v()));
  }
  return kv;
}

MemoryImage without_kv_below(const MemoryImage& image, Pos first) {
  MemoryImage out;
  out.seq = image.seq;
  out.flags = image.flags;
  out.rec = image.rec;
  out.window = image.window;
  if (image.kv) out.kv = kv_image_from(*image.kv, first);
  return out;
}

std::vector<uint8_t> encode_state(const StateContents& c) {
  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + c.memory.row_bytes() + c.logits.size() * 4 + c.tokens.size() * 4 + 4096);
  StateWriter w(out);
  w.u32(kStateMagic);
  // Written as the current version, or as version 1 when asked (peers that only read 1); a state read
  // from an older version (2: no rotation section) is written as the current one.
  if (c.version == 1 && !c.page_hashes.empty()) throw std::logic_error("state: version 1 cannot hold a page chain");
  if (c.version == 1 && c.memory.window) throw Error("state: version 1 cannot hold a sliding-window part (save with --swa-full)");
  w.u32(c.version == 1 ? 1u : kStateVersion);
  const size_t length_at = w.placeholder_u64();
  w.u64(c.fingerprint);
  w.u32(c.memory.flags);
  w.i32(c.memory.seq);

  SectionListWriter list(w);
  write_image_sections(list, c.memory);
  if (c.has_tokens)
    list.add(kSectionTokens, [&](StateWriter& s) {
      s.u32(static_cast<uint32_t>(c.tokens.size()));
      for (int32_t t : c.tokens) s.i32(t);
    });
  if (!c.logits.empty())
    list.add(kSectionLogits, [&](StateWriter& s) {
      s.u64(c.logits.size());
      s.floats(c.logits);
    });
  if (!c.checkpoints.empty())
    list.add(kSectionCheckpoints, [&](StateWriter& s) {
      s.u32(static_cast<uint32_t>(c.checkpoints.size()));
      for (const CheckpointImage& cp : c.checkpoints) {
        s.i32(cp.pos);
        s.i32(cp.image.seq);
        s.u32(cp.image.flags);
        SectionListWriter inner(s);
        write_image_sections(inner, cp.image);
        inner.finish();
      }
    });
  if (!c.page_hashes.empty())
    list.add(kSectionPages, [&](StateWriter& s) {
      s.u32(c.page_tokens);
      s.u32(static_cast<uint32_t>(c.page_hashes.size()));
      for (uint64_t h : c.page_hashes) s.u64(h);
    });
  list.finish();
  w.patch_u64(length_at, out.size() + kChecksumBytes);
  w.u64(XXH64(out.data(), out.size(), 0));
  return out;
}

StateContents decode_state(std::span<const uint8_t> blob, const std::string& what) {
  StateReader r(blob, what);
  if (blob.size() < kHeaderBytes + 4 + kChecksumBytes)
    r.fail("truncated: " + std::to_string(blob.size()) + " bytes is shorter than any state");
  const uint32_t magic = r.u32("magic");
  if (magic != kStateMagic) r.fail("not an agentkv state (magic '" + state_tag_name(magic) + "', expected 'AKVS')");
  StateContents c;
  c.version = r.u32("version");
  if (c.version < kStateOldestVersion || c.version > kStateVersion)
    r.fail("format version " + std::to_string(c.version) + "; this build reads versions " +
           std::to_string(kStateOldestVersion) + " to " + std::to_string(kStateVersion));
  const uint64_t length = r.u64("length");
  if (length != blob.size())
    r.fail(length > blob.size() ? "truncated: the header says " + std::to_string(length) + " bytes, got " +
                                      std::to_string(blob.size())
                                : "the header says " + std::to_string(length) + " bytes, got " +
                                      std::to_string(blob.size()) + " (trailing garbage)");
  const size_t body = blob.size() - kChecksumBytes;
  uint64_t stored;
  std::memcpy(&stored, blob.data() + body, sizeof stored);
  const uint64_t computed = XXH64(blob.data(), body, 0);
  if (stored != computed)
    r.fail("checksum mismatch (stored " + hex64(stored) + ", computed " + hex64(computed) + "): the state is corrupt");

  c.fingerprint = r.u64("fingerprint");
  const uint32_t flags = r.u32("flags");
  const SeqId seq = r.i32("sequence id");
  check_header_fields(r, seq, flags, "header");
  StateReader content = r.sub(body - r.offset(), "sections");
  std::vector<uint32_t> known = {kSectionKv, kSectionRecurrent, kSectionTokens, kSectionLogits, kSectionCheckpoints};
  if (c.version >= 2) known.push_back(kSectionPages);
  if (c.version >= 3) known.push_back(kSectionKvRotation);
  if (c.version >= 4) known.push_back(kSectionKvCode);
  if (c.version >= 5) known.push_back(kSectionWindowKv);
  std::vector<Section> sections = read_section_list(content, known, "state");
  content.expect_end("sections");
  c.memory = image_from_sections(sections, seq, flags, content, "state");

  if (StateReader* t = find_section(sections, kSectionTokens)) {
    const uint32_t n = t->u32("token count");
    const auto bytes = t->bytes(n, 4, "tokens");
    c.has_tokens = true;
    c.tokens.resize(n);
    if (n > 0) std::memcpy(c.tokens.data(), bytes.data(), bytes.size());  // no memcpy from/to null
    t->expect_end("token section");
  }
  if (StateReader* l = find_section(sections, kSectionLogits)) {
    const uint64_t n = l->u64("logit count");
    if (n == 0) l->fail("logit section with no logits");
    const auto bytes = l->bytes(n, 4, "logits");
    c.logits.resize(n);
    std::memcpy(c.logits.data(), bytes.data(), bytes.size());
    l->expect_end("logit section");
  }
  if (StateReader* k = find_section(sections, kSectionCheckpoints)) {
    // A checkpoint's KV image carries its rotation beside it from version 3 on.
    std::vector<uint32_t> checkpoint_sections = {kSectionKv, kSectionRecurrent};
    if (c.version >= 3) checkpoint_sections.push_back(kSectionKvRotation);
    if (c.version >= 4) checkpoint_sections.push_back(kSectionKvCode);
    if (c.version >= 5) checkpoint_sections.push_back(kSectionWindowKv);
    const uint32_t n = k->u32("checkpoint count");
    if (n > k->remaining() / 16) k->fail("checkpoint count " + std::to_string(n) + " cannot fit the section");
    for (uint32_t i = 0; i < n; ++i) {
      const std::string where = "checkpoint " + std::to_string(i);
      CheckpointImage cp;
      cp.pos = k->i32(where + ": position");
      const SeqId cseq = k->i32(where + ": sequence id");
      const uint32_t cflags = k->u32(where + ": flags");
      check_header_fields(*k, cseq, cflags, where);
      if (cp.pos < 0) k->fail(where + ": invalid position " + std::to_string(cp.pos));
      std::vector<Section> inner = read_section_list(*k, checkpoint_sections, where);
      cp.image = image_from_sections(inner, cseq, cflags, *k, where);
      c.checkpoints.push_back(std::move(cp));
    }
    k->expect_end("checkpoint section");
  }
  if (StateReader* pg = find_section(sections, kSectionPages)) {
    c.page_tokens = pg->u32("page tokens");
    if (c.page_tokens == 0) pg->fail("page section with 0 tokens per page");
    const uint32_t n = pg->u32("page count");
    if (n == 0) pg->fail("page section with no pages");
    if (n > pg->remaining() / 8) pg->fail("page count " + std::to_string(n) + " cannot fit the section");
    if (!c.has_tokens || static_cast<uint64_t>(n) * c.page_tokens > c.tokens.size())
      pg->fail(std::to_string(n) + " pages of " + std::to_string(c.page_tokens) + " tokens need the sequence's tokens");
    for (uint32_t i = 0; i < n; ++i) c.page_hashes.push_back(pg->u64("page hash"));
    pg->expect_end("page section");
  }
  return c;
}

}  // namespace agentkv::memory
