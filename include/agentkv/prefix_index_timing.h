// Times the prefix cache's own bookkeeping (no model, no attention) at a given number of cached
// pages: what a request pays to find, attach, publish and evict pages as the cache grows.
// `agentkv bench prefix-index` prints it (docs/measurement.md); the memory implements it
// (src/memory/prefix_index_timing.cpp) on a KV pool of tiny rows, one cell per cached token.
#pragma once
#include <cstddef>
#include <cstdint>

namespace agentkv {

struct PrefixIndexTiming {
  size_t pages = 0;                 // cached pages when measured (16 tokens each)
  size_t cells = 0;                 // KV cells of the pool
  double fill_s = 0;                // building the cache: chains attached, extended and published
  double publish_us_per_page = 0;   // during the fill: a chain's publish, per page it added
  double lookup_us = 0;             // one lookup of a cached 2,048-token prompt (128 pages)
  double attach_us_per_page = 0;    // attaching that prompt to an empty sequence, per page
  double evict_us_per_page = 0;     // evicting 2,048 unused pages, least recently used first, per page
};

// Builds a cache of at least n_pages pages (chains of 4,096 pages, each sharing its first 256 with
// the previous one) and times the operations above; seed picks the tokens.
PrefixIndexTiming time_prefix_index(size_t n_pages, uint32_t seed);

}  // namespace agentkv
