// agentkv bench prefix-index: the prefix cache's bookkeeping as it grows — lookup per request,
// attach / publish / evict per page — at 10 k, 100 k and 1 M cached pages (no model;
// agentkv/prefix_index_timing.h). Costs that grew with the cache show up as ratios to the first row.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "agentkv/prefix_index_timing.h"
#include "tools/args.h"
#include "tools/bench_modes.h"

namespace agentkv::tools {

int bench_prefix_index(Args& args) {
  if (args.flag("--help", "-h")) {
    std::puts("usage: agentkv bench prefix-index [--pages 10000,100000,1000000] [--seed 1]\n"
              "  per size: build a cache of that many 16-token pages (chains of 4,096 pages sharing\n"
              "  their first 256), then time a 2,048-token lookup, its attach (per page), the fill's\n"
              "  publishes (per page) and the eviction of 2,048 unused pages (per page)");
    return 0;
  }
  const std::vector<long long> sizes = args.nums("--pages", "", {10000, 100000, 1000000});
  const auto seed = static_cast<uint32_t>(args.num("--seed", "", 1));
  args.finish();
  std::printf("| cached pages | KV cells | fill s | lookup µs / request | attach µs / page | publish µs / page | evict µs / page |\n"
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (long long n : sizes) {
    if (n < 1) throw std::invalid_argument("--pages: sizes are positive");
    const PrefixIndexTiming t = time_prefix_index(static_cast<size_t>(n), seed);
    std::printf("| %zu | %zu | %.2f | %.2f | %.3f | %.3f | %.3f |\n", t.pages, t.cells, t.fill_s, t.lookup_us,
                t.attach_us_per_page, t.publish_us_per_page, t.evict_us_per_page);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace agentkv::tools
