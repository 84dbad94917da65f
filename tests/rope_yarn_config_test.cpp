// rope.scaling.type = yarn read as llama.cpp sets it up for a model (gpt-oss's keys): the YaRN
// parameters reach ModelConfig and the architectures' RopeSpec.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "gguf/gguf.h"
#include "model/config.h"

namespace agentkv {
namespace {

ModelConfig config_with(const std::string& scaling, float factor, uint32_t orig_ctx, float attn_factor = 0.0f) {
  gguf::Writer w;
  w.set_string("general.architecture", "qwen3");
  w.set_u32("qwen3.embedding_length", 64);
  w.set_u32("qwen3.block_count", 1);
  w.set_u32("qwen3.context_length", 131072);
  w.set_u32("qwen3.feed_forward_length", 128);
  w.set_f32("qwen3.attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_u32("qwen3.attention.head_count", 2);
  w.set_u32("qwen3.attention.head_count_kv", 1);
  w.set_u32("qwen3.attention.key_length", 32);
  w.set_u32("qwen3.attention.value_length", 32);
  w.set_f32("qwen3.rope.freq_base", 150000.0f);
  if (!scaling.empty()) w.set_string("qwen3.rope.scaling.type", scaling);
  if (factor != 0.0f) w.set_f32("qwen3.rope.scaling.factor", factor);
  if (orig_ctx) w.set_u32("qwen3.rope.scaling.original_context_length", orig_ctx);
  if (attn_factor != 0.0f) w.set_f32("qwen3.rope.scaling.attn_factor", attn_factor);
  w.add_tensor("token_embd.weight", GgmlType::F32, {64, 8}, std::vector<uint8_t>(64 * 8 * sizeof(float)));
  const auto bytes = w.to_bytes();
  auto r = gguf::Reader::from_memory(bytes, "yarn.gguf");
  return model_config_from_gguf(*r);
}

TEST(RopeYarnConfig, GptOssKeysGiveLlamaCppsParameters) {
  const ModelConfig c = config_with("yarn", 32.0f, 4096);
  EXPECT_EQ(c.rope_freq_scale, 1.0f / 32.0f);
  EXPECT_EQ(c.rope_yarn_ext_factor, 1.0f);
  EXPECT_EQ(c.rope_yarn_beta_fast, 32.0f);
  EXPECT_EQ(c.rope_yarn_beta_slow, 1.0f);
  EXPECT_EQ(c.rope_n_ctx_orig, 4096);
  // llama_context: get_mscale(32, 1) = 0.1 ln 32 + 1, times 1 / (1 + 0.1 ln 32), in float.
  const float factor = 1.0f / (1.0f / 32.0f);
  const float mscale = 0.1f * 1.0f * logf(factor) + 1.0f;
  EXPECT_EQ(c.rope_yarn_attn_factor, mscale * (1.0f / (1.0f + 0.1f * logf(factor))));
  EXPECT_NEAR(c.rope_yarn_attn_factor, 1.0f, 1e-6f);

  // Without original_context_length: the training context; rope.scaling.attn_factor multiplies.
  const ModelConfig d = config_with("yarn", 4.0f, 0, 2.0f);
  EXPECT_EQ(d.rope_n_ctx_orig, 131072);
  EXPECT_EQ(d.rope_yarn_attn_factor,
            (0.1f * 1.0f * logf(4.0f) + 1.0f) * (1.0f / (1.0f + 0.1f * logf(4.0f))) * 2.0f);
}

TEST(RopeYarnConfig, OtherScalingsRotatePlainly) {
  for (const char* s : {"", "none", "linear"}) {
    const ModelConfig c = config_with(s, 2.0f, 0);
    EXPECT_EQ(c.rope_yarn_ext_factor, 0.0f) << s;
    EXPECT_EQ(c.rope_yarn_attn_factor, 1.0f) << s;
    EXPECT_EQ(c.rope_freq_scale, std::string(s) == "none" ? 1.0f : 0.5f) << s;
  }
  EXPECT_THROW(config_with("longrope", 2.0f, 0), std::exception);
}

}  // namespace
}  // namespace agentkv
