// agentkv bench tiers: how fast each page tier gives a prompt's K/V back, against computing it.
// One sequence of -d synthetic tokens is prefilled (the cold cost), cut into pages as the server
// cuts them, and each page encoded as the record the tiers store. Then, per tier: what it stores
// (bytes, compression), how fast it stores, and how fast it loads every page back — the load
// alone and the load plus the decode and copy into the KV pool's rows, i.e. what a turn served
// from that tier spends before its own new tokens. Tiers: the warm tier in RAM (exact, and K/V
// requantized to q8_0 and q4_0), the disk tier with the page cache warm, and — with
// --drop-caches, as root — the disk cold. A memcpy of the same bytes is the machine's ceiling.
// Quality: after each load, 32 probe tokens are evaluated over the loaded K/V and their
// next-token distributions compared with the ones over the computed K/V (KL, top-1): exactly 0
// for the exact tiers. docs/memory-semantics.md, "Page tiers".
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>

#include <unistd.h>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/kv_page_records.h"
#include "agentkv/local_tiers.h"
#include "tools/args.h"
#include "tools/bench_common.h"
#include "tools/bench_modes.h"
#include "tools/kv_flags.h"
#include "tools/quality_divergence.h"

namespace agentkv::tools {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr uint32_t kPageTokens = 16;  // the server's page size (Scheduler's page_tokens)
constexpr int64_t kProbeTokens = 32;

// The probe's next-token log-probabilities (f16, one row per token) over the sequence's K/V
// [0, depth); the probe's own positions are removed after, leaving the sequence as it was.
std::vector<uint16_t> probe(Context& ctx, const std::vector<Token>& tokens, int64_t depth) {
  const int64_t n_vocab = ctx.model().n_vocab();
  Batch b;
  for (int64_t i = 0; i < kProbeTokens; ++i) b.add(tokens[static_cast<size_t>(depth + i)], static_cast<MemoryPos>(depth + i), {0}, true);
  if (ctx.decode(b) != 0) throw Error("bench tiers: the probe does not fit");
  std::vector<uint16_t> out(static_cast<size_t>(kProbeTokens * n_vocab));
  for (int64_t i = 0; i < kProbeTokens; ++i) logprobs_f16(ctx.logits(static_cast<int>(i)), n_vocab, out.data() + i * n_vocab);
  ctx.memory().seq_rm(0, static_cast<MemoryPos>(depth), -1);
  return out;
}

DivergenceStats divergence(const std::vector<uint16_t>& ref, const std::vector<uint16_t>& run, int64_t n_vocab) {
  DivergenceStats d;
  for (int64_t i = 0; i < kProbeTokens; ++i) d.add(compare_positions(ref.data() + i * n_vocab, run.data() + i * n_vocab, n_vocab));
  return d;
}

struct Page {
  uint64_t hash = 0;
  std::vector<uint8_t> record;
  std::vector<uint32_t> cells;
};

bool drop_page_cache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  f << "3\n";
  f.close();
  return static_cast<bool>(f);
}

struct LoadResult {
  double load_s = 0, adopt_s = 0;
  uint64_t bytes = 0;
};

// Loads every page (one get for all, as a turn's fetch does), then decodes and writes its rows.
LoadResult load_all(PageTier& tier, Context& ctx, const std::vector<Page>& pages, bool exact = true) {
  std::vector<uint64_t> hashes;
  for (const Page& p : pages) hashes.push_back(p.hash);
  LoadResult r;
  const auto t0 = Clock::now();
  const auto records = tier.get(hashes);
  r.load_s = seconds_since(t0);
  const auto t1 = Clock::now();
  for (size_t i = 0; i < pages.size(); ++i) {
    if (!records[i] || (exact && *records[i] != pages[i].record))
      throw Error("bench tiers: page " + std::to_string(i) + " did not come back as stored");
    r.bytes += records[i]->size();
    if (!write_kv_page(ctx, *records[i], pages[i].cells))
      throw Error("bench tiers: page " + std::to_string(i) + " does not decode");
  }
  r.adopt_s = seconds_since(t1);
  return r;
}

constexpr const char* kUsage =
    "usage: agentkv bench tiers -m MODEL [-d 2048] [-f TEXT] [--dir DIR] [--drop-caches] [-ctk f16 -ctv f16] [-t 2]\n"
    "  -f TEXT: the prompt and the 32 probe tokens from a text (default: synthetic tokens)\n"
    "  prefills -d tokens, cuts them into pages and times each tier storing and loading them back\n"
    "  --dir: the disk tier's folder (default: a fresh one under /tmp, removed after)\n"
    "  --drop-caches: also load from the disk with the page cache dropped (needs root)";

}  // namespace

int bench_tiers(Args& a) {
  if (a.flag("--help", "-h")) {
    std::puts(kUsage);
    return 0;
  }
  const std::string model_path = a.str("-m", "--model", "");
  const std::string text_path = a.str("-f", "--file", "");
  const int64_t depth = a.num("-d", "--depth", 2048);
  std::string dir = a.str("--dir", "", "");
  const bool drop_caches = a.flag("--drop-caches");
  ContextParams cp;
  cp.kv = read_kv_flags(a);
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  a.finish();
  if (model_path.empty()) throw std::invalid_argument("-m MODEL is required");
  if (depth < kPageTokens || depth % kPageTokens) throw std::invalid_argument("-d must be a positive multiple of 16");
  const bool own_dir = dir.empty();
  if (own_dir) dir = (std::filesystem::temp_directory_path() / ("agentkv-bench-tiers-" + std::to_string(::getpid()))).string();

  auto model = Model::load(model_path);
  cp.n_ctx = static_cast<uint32_t>(depth + kProbeTokens);
  Context ctx(*model, cp);
  std::vector<Token> tokens;  // the prompt, then the probe
  if (!text_path.empty()) {
    tokens = model->tokenizer().encode(read_text_file(text_path), /*add_special=*/false, /*parse_special=*/false);
    if (static_cast<int64_t>(tokens.size()) < depth + kProbeTokens) throw std::invalid_argument("-f: the text is shorter than -d + 32 tokens");
    tokens.resize(static_cast<size_t>(depth + kProbeTokens));
  } else {
    for (int64_t i = 0; i < depth + kProbeTokens; ++i) tokens.push_back(synthetic_token(i < depth ? 0 : 1, i, model->n_vocab()));
  }
  Batch b;
  b.add_sequence(tokens.data(), static_cast<size_t>(depth), 0, 0, false);
  const auto t0 = Clock::now();
  if (ctx.decode(b) != 0) throw Error("bench tiers: the prefill does not fit");
  const double prefill_s = seconds_since(t0);
  const std::vector<uint16_t> reference = probe(ctx, tokens, depth);
  const int64_t n_vocab = model->n_vocab();

  const std::vector<uint32_t> cell_of = kv_cells_of_positions(ctx, depth);
  std::vector<Page> pages;
  const auto t1 = Clock::now();
  for (int64_t first = 0; first < depth; first += kPageTokens) {
    Page p;
    p.hash = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(first / kPageTokens + 1);
    p.cells.assign(cell_of.begin() + first, cell_of.begin() + first + kPageTokens);
    p.record = encode_kv_page(ctx, p.hash, static_cast<uint32_t>(first),
                              std::span<const int32_t>(tokens.data() + first, kPageTokens), p.cells);
    pages.push_back(std::move(p));
  }
  const double encode_s = seconds_since(t1);
  uint64_t record_bytes = 0;
  for (const Page& p : pages) record_bytes += p.record.size();
  const double mb = static_cast<double>(record_bytes) / 1e6;

  // The machine's ceiling: one memcpy of the same bytes (page by page, as the records are).
  std::vector<uint8_t> sink(pages[0].record.size());
  const auto t2 = Clock::now();
  for (const Page& p : pages) std::memcpy(sink.data(), p.record.data(), std::min(sink.size(), p.record.size()));
  const double memcpy_s = seconds_since(t2);

  std::printf("model %s, KV %s/%s, %lld tokens: %zu pages, records %.1f MB (%.1f KB per page)\n",
              model_path.c_str(), std::string(ggml_type_name(cp.kv.type_k)).c_str(), std::string(ggml_type_name(cp.kv.type_v)).c_str(),
              static_cast<long long>(depth),
              pages.size(), mb, mb * 1e3 / static_cast<double>(pages.size()));
  std::printf("cold prefill: %.2f s (%.1f t/s); encoding the records: %.3f s (%.0f MB/s); memcpy %.0f MB/s\n\n", prefill_s,
              static_cast<double>(depth) / prefill_s, encode_s, mb / encode_s, mb / memcpy_s);
  std::printf("| tier | stored MB | of the records | store MB/s | load MB/s | load + into the pool | / cold prefill |"
              " probe KL (mean / max) | probe top-1 |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  auto row = [&](const std::string& name, double stored_mb, double store_s, const LoadResult& r, bool exact) {
    const double total = r.load_s + r.adopt_s;
    const DivergenceStats d = divergence(reference, probe(ctx, tokens, depth), n_vocab);
    std::printf("| %s | %.1f | %.3f | %s | %.0f | %.3f s (%.0f MB/s) | %.4f | %.2e / %.2e | %.1f %% |\n", name.c_str(),
                stored_mb, stored_mb / mb, store_s > 0 ? std::to_string(static_cast<int>(mb / store_s)).c_str() : "—",
                mb / r.load_s, total, mb / total, total / prefill_s, d.mean_kl(), d.max_kl(), 100.0 * d.top1_agreement());
    if (exact && d.max_kl() != 0) throw Error("bench tiers: " + name + " is exact, yet the probe moved");
  };

  std::vector<std::optional<GgmlType>> codecs = {std::nullopt};  // exact, then K/V requantized
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0})
    if (t != cp.kv.type_k) codecs.push_back(t);
  for (size_t c = 0; c < codecs.size(); ++c) {
    const std::unique_ptr<WarmTier> warm = make_warm_tier(ctx, codecs[c], record_bytes * 2, record_bytes * 2);
    for (const Page& p : pages) warm->put(p.hash, p.record);
    warm->flush();
    const WarmTierStats st = warm->stats();
    if (st.pages != pages.size()) throw Error("bench tiers: the warm tier dropped pages");
    row("warm RAM, " + warm->codec_name(), static_cast<double>(st.bytes) / 1e6, st.compress_seconds,
        load_all(*warm, ctx, pages, /*exact=*/c == 0), c == 0);
  }
  {
    std::unique_ptr<DiskTier> disk = make_disk_tier(dir, record_bytes * 2, record_bytes * 2);
    const auto t3 = Clock::now();
    for (const Page& p : pages) disk->put(p.hash, p.record);
    disk->flush();
    const double store_s = seconds_since(t3);
    if (disk->stats().pages_on_disk != pages.size()) throw Error("bench tiers: the disk tier dropped pages");
    row("disk, page cache warm", mb, store_s, load_all(*disk, ctx, pages), true);
    if (drop_caches) {
      if (!drop_page_cache()) throw Error("--drop-caches: cannot write /proc/sys/vm/drop_caches (root?)");
      // A restarted server: the folder indexed again.
      disk = make_disk_tier(dir, record_bytes * 2, record_bytes * 2);
      row("disk, page cache dropped", mb, 0, load_all(*disk, ctx, pages), true);
    }
  }
  if (own_dir) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace agentkv::tools
