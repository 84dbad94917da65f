// agentkv bench: llama-bench style prefill (ppN) and decode (tgN) figures at context depths.
//   agentkv bench -m M.gguf -p 512 -n 128 -d 0,4096 -t 2 -r 3 [-ctk f16 -ctv f16] [-o md|json]
// Prefill of depth d happens untimed before each measurement, as llama-bench -d does.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "agentkv/fake_prefix.h"
#include "agentkv/kv_status.h"
#include "agentkv/numerics.h"
#include "agentkv/error.h"
#include "agentkv/op_profile.h"
#include "agentkv/context.h"
#include "agentkv/model_stats.h"
#include "agentkv/read_bandwidth.h"
#include "agentkv/seq_snapshot.h"
#include "tools/args.h"
#include "tools/kv_flags.h"
#include "tools/bench_modes.h"
#include "tools/commands.h"

namespace agentkv::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct Measurement {
  std::string test;  // "pp512", "tg128"
  int64_t depth = 0;
  int64_t n_tokens = 0;
  std::vector<double> seconds;
  op_profile::Totals split{};  // seconds per kind of operation over the counted runs (--split)
  double split_fraction(op_profile::Kind kind) const {
    double total = 0;
    for (double x : seconds) total += x;
    return total > 0 ? split[static_cast<int>(kind)] / total : 0;
  }
  double mean_tps() const {
    double s = 0;
    for (double x : seconds) s += n_tokens / x;
    return s / seconds.size();
  }
  double median_tps() const {
    std::vector<double> tps;
    for (double x : seconds) tps.push_back(n_tokens / x);
    std::sort(tps.begin(), tps.end());
    const size_t n = tps.size();
    return n == 0 ? 0 : n % 2 ? tps[n / 2] : (tps[n / 2 - 1] + tps[n / 2]) / 2;
  }
  double stddev_tps() const {
    const double m = mean_tps();
    double v = 0;
    for (double x : seconds) v += (n_tokens / x - m) * (n_tokens / x - m);
    return seconds.size() > 1 ? std::sqrt(v / (seconds.size() - 1)) : 0;
  }
};

void fill_depth(Context& ctx, int64_t depth, std::mt19937& rng, bool fake) {
  ctx.memory().clear();
  if (fake) {  // --fake-depth: positions without compute, rows zero but backed by memory
    seq_fake_prefix(ctx, 0, static_cast<MemoryPos>(depth));
    prefault_kv(ctx);
    return;
  }
  std::uniform_int_distribution<Token> tok(0, static_cast<Token>(ctx.model().n_vocab() - 1));
  Batch b;
  for (int64_t start = 0; start < depth; start += ctx.params().n_ubatch) {
    b.clear();
    const int64_t end = std::min<int64_t>(depth, start + ctx.params().n_ubatch);
    for (int64_t p = start; p < end; ++p) b.add(tok(rng), static_cast<MemoryPos>(p), {0}, p + 1 == end);
    if (ctx.decode(b) != 0) throw Error("depth does not fit in the context");
  }
}

double time_prefill(Context& ctx, int64_t depth, int64_t n, std::mt19937& rng) {
  std::uniform_int_distribution<Token> tok(0, static_cast<Token>(ctx.model().n_vocab() - 1));
  Batch b;
  for (int64_t i = 0; i < n; ++i) b.add(tok(rng), static_cast<MemoryPos>(depth + i), {0}, i + 1 == n);
  const auto t0 = Clock::now();
  if (ctx.decode(b) != 0) throw Error("prompt does not fit in the context");
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// n_seq sequences decode together, one token each per step (as the server batches its slots);
// sequences 1.. start as copies of sequence 0's depth.
double time_decode(Context& ctx, int64_t depth, int64_t n, int n_seq, std::mt19937& rng) {
  std::uniform_int_distribution<Token> tok(0, static_cast<Token>(ctx.model().n_vocab() - 1));
  for (int s = 1; s < n_seq; ++s) ctx.memory().seq_cp(0, s, -1, -1);
  Batch b;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    b.clear();
    for (int s = 0; s < n_seq; ++s) b.add(tok(rng), static_cast<MemoryPos>(depth + i), {s}, true);
    if (ctx.decode(b) != 0) throw Error("generation does not fit in the context");
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string human_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  return buf;
}

// agentkv bench --fake-prefix-op -m M.gguf [-L 1024,8192,32768] [-r 50]: wall time of one
// seq_fake_prefix(ctx, 0, L) call (agentkv/fake_prefix.h; the sequence is removed, untimed,
// between calls), in µs.
// The first call of each L touches fresh cell-table pages and is reported separately.
int bench_fake_prefix_op(Args& a) {
  const std::string model_path = a.str("-m", "--model", "");
  const auto lengths = a.nums("-L", "--lengths", {1024, 8192, 32768});
  const int reps = static_cast<int>(a.num("-r", "--repetitions", 50));
  ContextParams cp;
  cp.kv = read_kv_flags(a);
  a.finish();
  if (model_path.empty()) throw std::invalid_argument("-m MODEL is required");
  if (reps < 1) throw std::invalid_argument("-r must be at least 1");
  auto model = Model::load(model_path);
  long long max_len = 0;
  for (auto L : lengths) {
    if (L < 1 || L > (1ll << 30)) throw std::invalid_argument("-L values must be in [1, 2^30]");
    max_len = std::max(max_len, L);
  }
  cp.n_ctx = static_cast<uint32_t>(max_len);
  Context ctx(*model, cp);
  std::printf("| model | L | first call µs | median µs | min µs |\n| --- | ---: | ---: | ---: | ---: |\n");
  for (auto L : lengths) {
    std::vector<double> us;
    for (int r = 0; r <= reps; ++r) {
      const auto t0 = Clock::now();
      seq_fake_prefix(ctx, 0, static_cast<MemoryPos>(L));
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      if (ctx.memory().seq_pos_max(0) != L - 1) throw Error("fake prefix did not produce the positions");
      ctx.memory().seq_rm(0, -1, -1);
    }
    const double first = us.front();
    us.erase(us.begin());
    std::sort(us.begin(), us.end());
    std::printf("| %s | %lld | %.1f | %.1f | %.1f |\n", model->config().arch_key.c_str(), L, first, us[us.size() / 2],
                us.front());
  }
  return 0;
}

int cmd_bench(const std::vector<std::string>& argv) {
  if (!argv.empty() && (argv[0] == "grammar" || argv[0] == "quality" || argv[0] == "evict" || argv[0] == "tiers")) {
    Args sub(std::vector<std::string>(argv.begin() + 1, argv.end()));
    if (argv[0] == "grammar") return bench_grammar(sub);
    if (argv[0] == "quality") return bench_quality(sub);
    return argv[0] == "evict" ? bench_evict(sub) : bench_tiers(sub);
  }
  if (!argv.empty() && (argv[0] == "spec" || argv[0] == "vision")) {
    Args sub(std::vector<std::string>(argv.begin() + 1, argv.end()));
    return argv[0] == "spec" ? bench_spec(sub) : bench_vision(sub);
  }
  if (!argv.empty() && argv[0] == "prefix-index") {
    Args sub(std::vector<std::string>(argv.begin() + 1, argv.end()));
    return bench_prefix_index(sub);
  }
  if (!argv.empty() && (argv[0] == "fakeprefix" || argv[0] == "turns" || argv[0] == "handoff")) {
    Args sub(std::vector<std::string>(argv.begin() + 1, argv.end()));  // measurement benches: bench_*.cpp
    return argv[0] == "fakeprefix" ? bench_fakeprefix(sub) : argv[0] == "turns" ? bench_turns(sub) : bench_handoff(sub);
  }
  Args a(argv);
  if (a.flag("--fake-prefix-op")) return bench_fake_prefix_op(a);
  if (a.flag("--help", "-h")) {
    std::puts("usage: agentkv bench -m MODEL [-p 512] [-n 128] [-d 0] [-t 2] [-r 3] [-ub 512]\n"
              "                     [-ctk f16] [-ctv f16] [--kv-rotation auto|on|off] [--kv-rotation-seed N]\n"
              "                     [-o md|json] [--bandwidth] [--split] [-np 1]\n"
              "                     [--batch-invariant] [--fake-depth] [--kv-hot N] [--kv-tail-type T]\n"
              "  --fake-depth: the depth as a fake prefix (zero K/V rows, no prefill; dense models): decode figures\n"
              "                at depths whose prefill would take too long\n"
              "  --split: share of each test's time in matmuls, attention and recurrent state updates\n"
              "  -np N: tgN decodes N sequences together (one token each per step, as the server batches\n"
              "         slots) and reports their aggregate tokens/s\n"
              "       agentkv bench --fake-prefix-op -m MODEL [-L 1024,8192,32768] [-r 50]\n"
              "       agentkv bench fakeprefix|turns|handoff --help   (docs/measurement.md)\n"
              "       agentkv bench grammar -m MODEL [--json-schema F | --grammar F] [-n 128] [-r 3] [-t 2]\n"
              "       agentkv bench quality -m MODEL -f TEXT [--kv-types all] ...   (--help; docs/quality-bench.md)\n"
              "       agentkv bench evict -m MODEL -f TEXT [--budgets 0.5,0.25] | --cost-depth D   (--help; docs/quality-bench.md)\n"
              "       agentkv bench tiers -m MODEL [-d 2048] [--drop-caches]   (page tiers' store / load bandwidth; --help)\n"
              "       agentkv bench prefix-index [--pages 10000,100000,1000000]   (the prefix cache's bookkeeping; --help)\n"
              "       agentkv bench spec -m MODEL [-n 128] [-k 1,2,4,8]   (greedy speculative verification; --help)\n"
              "       agentkv bench vision --mmproj P [--size 1280x720] [--image F]   (screenshot encode time; --help)");
    return 0;
  }
  const std::string model_path = a.str("-m", "--model", "");
  const auto pps = a.nums("-p", "--n-prompt", {512});
  const auto tgs = a.nums("-n", "--n-gen", {128});
  const auto depths = a.nums("-d", "--n-depth", {0});
  const int reps = static_cast<int>(a.num("-r", "--repetitions", 3));
  const std::string out_fmt = a.str("-o", "--output", "md");
  const bool bandwidth = a.flag("--bandwidth");
  const bool split = a.flag("--split");
  // Depth as a fake prefix (zero K/V rows, no prefill): attention reads d keys as after a real
  // prefill, for decode figures at depths whose prefill would take too long (dense models only).
  const bool fake_depth = a.flag("--fake-depth");
  set_batch_invariant(a.flag("--batch-invariant"));  // kernels/numerics.h
  const int n_parallel = static_cast<int>(a.num("-np", "--parallel", 1));
  ContextParams cp;
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  cp.n_ubatch = static_cast<uint32_t>(a.num("-ub", "--ubatch-size", 512));
  cp.kv = read_kv_flags(a);
  a.finish();
  if (model_path.empty()) throw std::invalid_argument("-m MODEL is required");
  if (n_parallel < 1 || n_parallel > 64) throw std::invalid_argument("-np must be in [1, 64]");

  auto model = Model::load(model_path);
  if (fake_depth && model->config().is_hybrid())
    throw std::invalid_argument("--fake-depth: dense models only (a recurrent state cannot drop the runs between measurements)");
  int64_t max_ctx = 0;
  for (auto d : depths)
    for (auto p : pps) max_ctx = std::max<int64_t>(max_ctx, d + p);
  for (auto d : depths)
    for (auto n : tgs) max_ctx = std::max<int64_t>(max_ctx, d + n);
  // Decoding sequences share the depth's cells (seq_cp) and add their own tokens.
  int64_t max_tg = 0;
  for (auto n : tgs) max_tg = std::max<int64_t>(max_tg, n);
  cp.n_ctx = static_cast<uint32_t>(max_ctx + 1 + (n_parallel - 1) * max_tg);
  cp.n_seq_max = static_cast<uint32_t>(n_parallel);
  Context ctx(*model, cp);
  const ModelStats ms = model_stats(*model);
  const double gbs = bandwidth ? measure_read_bandwidth_gbs(ctx) : 0.0;

  op_profile::set_enabled(split);
  auto add_split = [](Measurement& m) {
    const op_profile::Totals t = op_profile::totals();
    for (int k = 0; k < op_profile::kNumKinds; ++k) m.split[k] += t[k];
  };
  std::mt19937 rng(1234);
  std::vector<Measurement> results;
  for (int64_t d : depths) {
    // The depth is prefilled once; every run starts from an in-memory snapshot of it (exact, and
    // it works for hybrid models whose recurrent state cannot drop a suffix).
    fill_depth(ctx, d, rng, fake_depth);
    // A fake depth is reset by dropping what the run added (dense models only, so a suffix can go):
    // no copy of a depth that may not fit in RAM twice (a windowed cache's tail on disk).
    std::optional<SeqSnapshot> depth_state;
    if (!fake_depth) depth_state = SeqSnapshot::capture(ctx, -1);
    auto reset_to_depth = [&] {
      if (depth_state) {
        depth_state->restore(ctx, -1);
        return;
      }
      ctx.memory().seq_rm(0, static_cast<MemoryPos>(d), -1);
      for (int s = 1; s < n_parallel; ++s) ctx.memory().seq_rm(s, -1, -1);
    };
    for (int64_t p : pps) {
      if (p <= 0) continue;
      Measurement m{"pp" + std::to_string(p), d, p, {}};
      for (int r = 0; r <= reps; ++r) {  // first run warms up and is not counted
        reset_to_depth();
        op_profile::reset();
        const double s = time_prefill(ctx, d, p, rng);
        if (r > 0) {
          m.seconds.push_back(s);
          add_split(m);
        }
      }
      results.push_back(m);
    }
    for (int64_t n : tgs) {
      if (n <= 0) continue;
      // With -np the figure is the aggregate over all sequences (tokens of all of them per second).
      Measurement m{"tg" + std::to_string(n) + (n_parallel > 1 ? " x" + std::to_string(n_parallel) : ""), d,
                    n * n_parallel, {}};
      for (int r = 0; r <= reps; ++r) {
        reset_to_depth();
        op_profile::reset();
        const double s = time_decode(ctx, d, n, n_parallel, rng);
        if (r > 0) {
          m.seconds.push_back(s);
          add_split(m);
        }
      }
      results.push_back(m);
    }
  }

  // A decode step reads every weight once for all its sequences, and each sequence's own KV.
  auto decode_bytes_per_token = [&](int64_t depth) -> uint64_t {
    return (ms.decode_bytes_per_token + n_parallel * kv_bytes_per_token(*model, cp.kv.type_k, cp.kv.type_v, depth)) /
           n_parallel;
  };
  const std::string model_desc = model->config().arch_key + " " + (model->config().name.empty() ? "" : model->config().name + " ");
  if (out_fmt == "json") {
    nlohmann::json j;
    j["model"] = model_path;
    j["arch"] = model->config().arch_key;
    j["n_params"] = ms.n_params;
    j["model_bytes"] = ms.weight_bytes;
    j["decode_weight_bytes_per_token"] = ms.decode_bytes_per_token;
    j["threads"] = cp.n_threads;
    j["n_ubatch"] = cp.n_ubatch;
    j["type_k"] = std::string(ggml_type_name(cp.kv.type_k));
    j["type_v"] = std::string(ggml_type_name(cp.kv.type_v));
    if (bandwidth) j["read_bandwidth_gbs"] = gbs;
    auto arr = nlohmann::json::array();
    for (const auto& m : results) {
      nlohmann::json r{{"test", m.test}, {"depth", m.depth}, {"n_tokens", m.n_tokens},
                       {"avg_ts", m.mean_tps()}, {"stddev_ts", m.stddev_tps()},
                       {"median_ts", m.median_tps()}, {"samples_s", m.seconds}};
      if (split) {
        for (int k = 0; k < op_profile::kNumKinds; ++k) {
          const auto kind = static_cast<op_profile::Kind>(k);
          r[std::string(op_profile::kind_name(kind)) + "_fraction"] = m.split_fraction(kind);
        }
      }
      if (m.test.rfind("tg", 0) == 0) {
        const uint64_t bytes = decode_bytes_per_token(m.depth);
        r["bytes_per_token"] = bytes;
        r["achieved_gbs"] = bytes * m.mean_tps() / 1e9;
        if (bandwidth) r["roofline_ts"] = gbs * 1e9 / bytes, r["roofline_fraction"] = bytes * m.mean_tps() / 1e9 / gbs;
      }
      arr.push_back(r);
    }
    j["results"] = arr;
    j["rss_bytes"] = current_rss_bytes();
    j["peak_rss_bytes"] = peak_rss_bytes();
    {
      const KvStatus kv = kv_status(ctx);
      j["kv_cache_bytes"] = kv.present ? kv.storage_bytes + kv.window_storage_bytes
                                       : kv_bytes_per_token(*model, cp.kv.type_k, cp.kv.type_v, cp.n_ctx);
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf("| model | size | params | threads | test | t/s | median t/s |%s%s\n", bandwidth ? " GB/s read | roofline |" : "",
                split ? " matmul | attention | recurrent | other |" : "");
    std::printf("| --- | ---: | ---: | ---: | --- | ---: | ---: |%s%s\n", bandwidth ? " ---: | ---: |" : "",
                split ? " ---: | ---: | ---: | ---: |" : "");
    for (const auto& m : results) {
      const std::string test = m.test + (m.depth ? " @ d" + std::to_string(m.depth) : "");
      std::printf("| %s| %s | %.2f M | %d | %s | %.2f ± %.2f | %.2f |", model_desc.c_str(),
                  human_bytes(ms.weight_bytes).c_str(), ms.n_params / 1e6, cp.n_threads, test.c_str(), m.mean_tps(),
                  m.stddev_tps(), m.median_tps());
      if (bandwidth) {
        if (m.test.rfind("tg", 0) == 0) {
          const uint64_t bytes = decode_bytes_per_token(m.depth);
          std::printf(" %.1f | %.0f%% of %.1f t/s |", bytes * m.mean_tps() / 1e9, 100.0 * bytes * m.mean_tps() / 1e9 / gbs,
                      gbs * 1e9 / bytes);
        } else {
          std::printf(" | |");
        }
      }
      if (split) {
        double rest = 1;
        for (int k = 0; k < op_profile::kNumKinds; ++k) {
          const double f = m.split_fraction(static_cast<op_profile::Kind>(k));
          rest -= f;
          std::printf(" %.1f%% |", 100 * f);
        }
        std::printf(" %.1f%% |", 100 * std::max(0.0, rest));
      }
      std::printf("\n");
    }
    if (bandwidth) std::printf("\nmeasured read bandwidth: %.1f GB/s\n", gbs);
    // A windowed cache reserves hot rows and its tail (in RAM or in mapped files) separately.
    const KvStatus res = kv_status(ctx);
    const double kv_mib = (res.windowed ? static_cast<double>(res.hot_bytes + res.tail_bytes + res.window_storage_bytes)
                                        : static_cast<double>(res.storage_bytes + res.window_storage_bytes)) /
                          1048576.0;
    std::printf("\nresident memory: %.1f MiB now, %.1f MiB peak (file %.1f MiB + KV cache %.1f MiB for %u cells",
                current_rss_bytes() / 1048576.0, peak_rss_bytes() / 1048576.0, ms.weight_bytes / 1048576.0, kv_mib, cp.n_ctx);
    if (res.windowed)
      std::printf(": %u hot, %.1f MiB; the tail %.1f MiB%s", res.hot_cells, res.hot_bytes / 1048576.0, res.tail_bytes / 1048576.0,
                  cp.kv.tail_dir.empty() ? "" : " in mapped files");
    if (res.window_cells > 0)
      std::printf("; of it the sliding-window layers' part %.1f MiB for %u cells", res.window_storage_bytes / 1048576.0,
                  res.window_cells);
    std::printf(")\n");
    // What the last run's sequence holds (its depth and tokens): the memory one such sequence costs.
    if (const MemoryPos last = ctx.memory().seq_pos_max(0); last >= 0) {
      const SeqKvBytes held = seq_kv_bytes(ctx, 0);
      std::printf("K/V held by the last run's sequence (%d positions): %.1f MiB (main cache %.1f MiB, sliding-window part %.1f MiB)\n",
                  last + 1, held.total() / 1048576.0, held.main / 1048576.0, held.window / 1048576.0);
    }
  }
  return 0;
}

Registrar reg("bench", [](const std::vector<std::string>& args) {
  try {
    return cmd_bench(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentkv bench: %s\n", e.what());
    return 1;
  }
});

}  // namespace
}  // namespace agentkv::tools
