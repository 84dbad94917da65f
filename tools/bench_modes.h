// The measurement benches dispatched from `agentkv bench <mode>` (tools/cmd_bench.cpp).
// docs/measurement.md describes what each one measures (quality: docs/quality-bench.md).
#pragma once
#include "tools/args.h"

namespace agentkv::tools {

int bench_fakeprefix(Args& args);  // agentkv bench fakeprefix
int bench_turns(Args& args);       // agentkv bench turns
int bench_handoff(Args& args);     // agentkv bench handoff
int bench_grammar(Args& args);     // agentkv bench grammar (constrained decoding speed)
int bench_quality(Args& args);     // agentkv bench quality (PPL, KL, pass-key recall per KV type)
int bench_tiers(Args& args);       // agentkv bench tiers (page tiers: store and load bandwidth against a cold prefill)
int bench_evict(Args& args);       // agentkv bench evict (eviction policies: KL, recall at KV budgets; scoring cost)
int bench_prefix_index(Args& args);  // agentkv bench prefix-index (the prefix cache's bookkeeping at 10 k .. 1 M pages)
int bench_spec(Args& args);        // agentkv bench spec (greedy speculative verification: oracle and n-gram drafts)
int bench_vision(Args& args);      // agentkv bench vision (the vision projector's encode time per screenshot)

}  // namespace agentkv::tools
