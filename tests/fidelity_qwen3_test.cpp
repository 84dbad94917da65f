// agentkv vs llama.cpp on the dense Qwen3 fixtures: same prompt tokens, teacher-forced top-10
// logprobs no further from llama.cpp's run than llama.cpp's own second run (n_ubatch 7, 1 thread)
// is, and greedy continuations equal wherever llama.cpp's two runs agree.
#include "fidelity_common.h"

using agentkv::testing::check_model;

TEST(FidelityQwen3, Micro) { check_model("qwen3-micro"); }
TEST(FidelityQwen3, MicroQ8_0) { check_model("qwen3-micro-q8_0"); }
TEST(FidelityQwen3, TinyQ4_K_M) { check_model("qwen3-tiny-q4_k_m"); }
