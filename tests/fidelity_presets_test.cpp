// agentkv vs llama.cpp on the presets of the architectures added after the fixtures were made
// (Qwen3-MoE, Llama 3, Qwen3-Next, Gemma 3, gpt-oss, Qwen3-VL text): the model exactly as `agentkv mkmodel --preset NAME` writes it, against
// llama.cpp's outputs for that file (tests/data/reference*/, made by tests/reference/README.md's
// commands), by the same yardstick as the fixture models.
#include "fidelity_common.h"

using agentkv::testing::check_preset;

TEST(FidelityQwen3Moe, Micro) { check_preset("qwen3moe-micro"); }
TEST(FidelityLlama, Micro) { check_preset("llama-micro"); }
TEST(FidelityQwen3VL, Micro) { check_preset("qwen3vl-micro"); }
TEST(FidelityQwen3VLMoe, Micro) { check_preset("qwen3vlmoe-micro"); }
TEST(FidelityQwen3Next, Micro) { check_preset("qwen3next-micro"); }
TEST(FidelityGemma3, Micro) { check_preset("gemma3-micro"); }
TEST(FidelityGptOss, Micro) { check_preset("gpt-oss-micro"); }
TEST(FidelityGptOss, MicroMxfp4Experts) { check_preset("gpt-oss-micro", "mxfp4_moe"); }
