#include "agentkv/session_state.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <cstring>
#include <fstream>
#include <string_view>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "agentkv/error.h"
#include "engine/context_impl.h"
#include "engine/seq_snapshot_impl.h"
#include "gguf/gguf.h"
#include "memory/memory_state.h"
#include "memory/prefix_index.h"
#include "memory/state_info.h"
#include "memory/state_io.h"
#include "model/model.h"

namespace agentkv {
static_assert(kSavePartialOnly == memory::kStatePartialOnly, "public and memory flag bits agree");

namespace {

constexpr size_t kFingerprintDataBytes = 64;  // leading bytes of every tensor that enter the hash

class HashInput {
 public:
  template <typename T>
  void pod(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof v);
  }
  void str(std::string_view s) {
    pod(static_cast<uint64_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  void raw(const uint8_t* p, size_t n) { bytes_.insert(bytes_.end(), p, p + n); }
  uint64_t digest() const { return XXH64(bytes_.data(), bytes_.size(), 0); }

 private:
  std::vector<uint8_t> bytes_;
};

void check_logits(const Context& ctx, std::span<const float> logits) {
  if (!logits.empty() && static_cast<int64_t>(logits.size()) != ctx.model().n_vocab())
    throw Error("state: " + std::to_string(logits.size()) + " logits given, the model has " +
                std::to_string(ctx.model().n_vocab()));
}

void check_tokens(const Context& ctx, std::span<const Token> tokens, const std::string& what) {
  // Negative ids are image rows (agentkv/vision.h), for the models that take images.
  const bool images = ArchModel::of(ctx.model()).takes_images();
  for (Token t : tokens)
    if ((t < 0 && !images) || t >= ctx.model().n_vocab())
      throw Error(what + ": token id " + std::to_string(t) + " outside the vocabulary of " +
                  std::to_string(ctx.model().n_vocab()));
}

std::vector<uint8_t> save(const Context& ctx, memory::SeqId seq, const SaveOptions& o) {
  check_logits(ctx, o.logits);
  if (o.with_tokens) check_tokens(ctx, o.tokens, "state");
  memory::StateContents c;
  c.fingerprint = model_fingerprint(ctx.model());
  c.memory = memory::memory_state_view(sequence_memory(ctx), seq, o.flags);
  c.has_tokens = o.with_tokens;
  c.tokens.assign(o.tokens.begin(), o.tokens.end());
  c.logits.assign(o.logits.begin(), o.logits.end());
  for (const SnapshotAt& cp : o.checkpoints) c.checkpoints.push_back({cp.pos, cp.snapshot->impl().snapshot.image()});
  if (const memory::PrefixIndex* index = memory::prefix_index_of(sequence_memory(ctx));
      index && o.snapshots_salt && sequence_memory(ctx).needs_snapshots() && o.with_tokens)
    for (const auto& [n_tokens, snap] : index->snapshots_along(o.tokens, *o.snapshots_salt))
      c.checkpoints.push_back({static_cast<memory::Pos>(n_tokens) - 1, snap->image()});
  // The sequence as a page chain, named as this memory's prefix index names pages (no salt: a
  // state file carries none), so a reader can tell which pages it already holds.
  if (const memory::PrefixIndex* index = memory::prefix_index_of(sequence_memory(ctx)); index && o.with_tokens && seq >= 0) {
    c.page_tokens = index->config().page_tokens;
    c.page_hashes.clear();
    index->hasher().extend(o.tokens, 0, c.page_hashes);
  }
  return memory::encode_state(c);
}

LoadedState load(Context& ctx, std::span<const uint8_t> blob, memory::SeqId dest, const std::string& what,
                 std::optional<uint64_t> share_salt) {
  memory::StateContents c = memory::decode_state(blob, what);
  const uint64_t mine = model_fingerprint(ctx.model());
  if (c.fingerprint != mine)
    throw Error(what + ": saved by another model (fingerprint " + memory::hex64(c.fingerprint) + ", this model " +
                memory::hex64(mine) + ")");
  if (dest >= 0 && !c.memory.per_sequence())
    throw Error(what + ": holds the whole memory, not one sequence");
  if (dest < 0 && c.memory.per_sequence())
    throw Error(what + ": holds sequence " + std::to_string(c.memory.seq) + ", not the whole memory");
  if (!c.logits.empty() && static_cast<int64_t>(c.logits.size()) != ctx.model().n_vocab())
    throw Error(what + ": " + std::to_string(c.logits.size()) + " logits, the model has " +
                std::to_string(ctx.model().n_vocab()));
  check_tokens(ctx, c.tokens, what);
  for (const memory::CheckpointImage& cp : c.checkpoints) memory::check_memory_layout(sequence_memory(ctx), cp.image);
  memory::PrefixIndex* index = memory::prefix_index_of(sequence_memory(ctx));
  if (index && !c.page_hashes.empty() && c.page_tokens == index->config().page_tokens) {
    std::vector<uint64_t> chain;
    index->hasher().extend(std::span<const Token>(c.tokens).first(c.page_hashes.size() * c.page_tokens), 0, chain);
    if (chain != c.page_hashes) throw Error(what + ": its page chain does not match its tokens");
  }

  // Pages this memory already holds replace the blob's first rows (attached after the restore).
  size_t n_shared = 0;
  memory::MemoryImage suffix;
  if (share_salt && index && dest >= 0 && c.has_tokens && c.memory.kv && c.memory.flags == memory::kStateAll) {
    n_shared = index->cached_kv(c.tokens, *share_salt, c.tokens.size());
    if (n_shared > 0) suffix = memory::without_kv_below(c.memory, static_cast<memory::Pos>(n_shared));
  }
  const memory::MemoryImage& restored = n_shared > 0 ? suffix : c.memory;

  // Everything that can be refused has been checked once the plan exists; only then change memory.
  const memory::MemoryRestorePlan plan = memory::plan_memory_restore(sequence_memory(ctx), restored, dest);
  LoadedState out;
  out.saved_seq = c.memory.seq;
  out.flags = c.memory.flags;
  out.has_tokens = c.has_tokens;
  out.tokens = std::move(c.tokens);
  out.logits = std::move(c.logits);
  for (const memory::CheckpointImage& cp : c.checkpoints) {
    LoadedCheckpoint loaded{cp.pos, SeqSnapshot()};
    loaded.snapshot.impl().snapshot = memory::MemorySnapshot::copy_of(cp.image);
    out.checkpoints.push_back(std::move(loaded));
  }
  if (dest < 0 && index) index->clear();  // the whole memory is replaced: no cached page survives
  memory::apply_memory_restore(sequence_memory(ctx), restored, plan);
  if (n_shared > 0) index->attach_kv(dest, out.tokens, *share_salt, n_shared);
  out.n_shared = n_shared;
  return out;
}

}  // namespace

uint64_t model_fingerprint(const Model& model) {
  const ModelConfig& c = model.config();
  HashInput h;
  h.str("agentkv model fingerprint 1");
  h.str(c.arch_key);
  for (int64_t v : {c.n_vocab, c.n_embd, int64_t{c.n_layer}, int64_t{c.n_layer_file}, int64_t{c.n_head},
                    int64_t{c.n_head_kv}, c.head_dim_k, c.head_dim_v, c.n_ff, c.n_rot, int64_t{c.ssm_d_conv},
                    c.ssm_d_state, int64_t{c.ssm_n_v_heads}, int64_t{c.ssm_n_k_heads}, c.ssm_d_inner,
                    int64_t{c.n_expert}, int64_t{c.n_expert_used}, c.n_ff_expert, c.n_ff_shared})
    h.pod(v);
  for (float v : {c.rms_eps, c.rope_freq_base, c.rope_freq_scale, c.attn_scale}) h.pod(v);
  for (int32_t v : c.rope_sections) h.pod(v);
  h.pod(static_cast<uint8_t>(c.tied_output));
  for (bool r : c.layer_recurrent) h.pod(static_cast<uint8_t>(r));
  for (const gguf::TensorInfo& t : ArchModel::of(model).gguf().tensors()) {
    h.str(t.name);
    h.pod(static_cast<uint32_t>(t.type));
    for (int64_t ne : t.ne) h.pod(ne);
    if (t.data) h.raw(t.data, static_cast<size_t>(std::min<uint64_t>(t.nbytes, kFingerprintDataBytes)));
  }
  return h.digest();
}

std::vector<uint8_t> save_seq(const Context& ctx, memory::SeqId seq, const SaveOptions& options) {
  if (seq < 0 || static_cast<uint32_t>(seq) >= ctx.params().n_seq_max)
    throw Error("state: sequence id " + std::to_string(seq) + " outside [0, " +
                std::to_string(ctx.params().n_seq_max) + ")");
  return save(ctx, seq, options);
}

std::vector<uint8_t> save_all(const Context& ctx, const SaveOptions& options) { return save(ctx, -1, options); }

LoadedState load_seq(Context& ctx, std::span<const uint8_t> blob, memory::SeqId dest, const std::string& what,
                     std::optional<uint64_t> share_salt) {
  if (dest < 0 || static_cast<uint32_t>(dest) >= ctx.params().n_seq_max)
    throw Error(what + ": destination sequence " + std::to_string(dest) + " outside [0, " +
                std::to_string(ctx.params().n_seq_max) + ")");
  return load(ctx, blob, dest, what, share_salt);
}

LoadedState load_all(Context& ctx, std::span<const uint8_t> blob, const std::string& what) {
  return load(ctx, blob, -1, what, std::nullopt);
}

size_t adopt_checkpoints(Context& ctx, std::span<const Token> tokens, uint64_t salt,
                         std::vector<LoadedCheckpoint> checkpoints) {
  memory::PrefixIndex* index = memory::prefix_index_of(sequence_memory(ctx));
  if (!index || !sequence_memory(ctx).needs_snapshots()) return 0;
  size_t taken = 0;
  for (LoadedCheckpoint& c : checkpoints)
    if (c.pos >= 0 && static_cast<size_t>(c.pos) < tokens.size() &&
        index->adopt_snapshot(tokens.first(static_cast<size_t>(c.pos) + 1), salt, std::move(c.snapshot.impl().snapshot)))
      ++taken;
  return taken;
}

bool starts_like_state(std::span<const uint8_t> first_bytes) {
  uint32_t v = 0;
  if (first_bytes.size() < sizeof v) return false;
  std::memcpy(&v, first_bytes.data(), sizeof v);
  return v == memory::kStateMagic;
}

StateSummary summarize_state(std::span<const uint8_t> blob, const std::string& what) {
  const memory::StateContents decoded = memory::decode_state(blob, what);
  StateSummary s;
  s.has_tokens = decoded.has_tokens;
  s.kv_cells = decoded.memory.kv ? decoded.memory.kv->cells.size() : 0;
  s.fingerprint = decoded.fingerprint;
  s.description = memory::describe_state(decoded, blob.size());
  return s;
}

void write_state_file(const std::string& path, std::span<const uint8_t> blob) {
  // A temporary file of this call's own (mkstemp: O_CREAT | O_EXCL, mode 0600), so that concurrent
  // writers never share one and a file or symlink placed beforehand is never written through.
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw Error("cannot write state file " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < blob.size()) {
    const ssize_t n = ::write(fd, blob.data() + done, blob.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = std::strerror(n < 0 ? errno : EIO);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error("cannot write state file " + path + ": " + err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("cannot write state file " + path + ": " + err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error("cannot rename " + tmp + " to " + path + ": " + err);
  }
}

std::vector<uint8_t> read_state_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw Error("cannot open state file " + path + ": " + std::strerror(errno));
  const std::streamoff size = f.tellg();
  if (size < 0) throw Error("cannot read state file " + path);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(bytes.data()), size);
  if (!f) throw Error("cannot read state file " + path + ": " + std::strerror(errno));
  return bytes;
}

}  // namespace agentkv
