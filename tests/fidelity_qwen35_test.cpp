// agentkv vs llama.cpp on the hybrid Qwen3.5 fixtures (Gated DeltaNet + gated attention, dense
// FFN and MoE), by the same yardstick as the dense model.
#include "fidelity_common.h"

using agentkv::testing::check_model;

TEST(FidelityQwen35, Qwen35MoeMicro) { check_model("qwen35moe-micro"); }
TEST(FidelityQwen35, Qwen35MoeMicroQ8_0) { check_model("qwen35moe-micro-q8_0"); }
TEST(FidelityQwen35, Qwen35Micro) { check_model("qwen35-micro"); }
