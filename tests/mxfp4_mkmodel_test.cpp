// `agentkv mkmodel --type mxfp4_moe`: llama-quantize's MXFP4_MOE mix (expert matrices in mxfp4,
// every other quantized matrix and the output head in q8_0), and a written MoE model that loads
// (its expert tensors read back as mxfp4) and decodes to finite logits close to its f16 twin's.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "mkmodel_decode_util.h"
#include "model/presets.h"
#include "model/quant_mix.h"

namespace agentkv::mkmodel {
namespace {

TEST(Mxfp4MkModel, TypeNameAndLlamaFileTypeId) {
  EXPECT_EQ(file_type_from_name("mxfp4_moe"), FileType::MostlyMXFP4_MOE);
  EXPECT_EQ(file_type_from_name("MXFP4_MOE"), FileType::MostlyMXFP4_MOE);
  EXPECT_EQ(file_type_name(FileType::MostlyMXFP4_MOE), "mxfp4_moe");
  EXPECT_EQ(static_cast<uint32_t>(FileType::MostlyMXFP4_MOE), 38u);  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
  EXPECT_TRUE(is_quantized_file_type(FileType::MostlyMXFP4_MOE));
}

TEST(Mxfp4MkModel, MixPutsExpertsInMxfp4AndTheRestInQ8_0) {
  int experts = 0;
  for (const auto& t : plan_tensors(find_preset("qwen3moe-micro"), FileType::MostlyMXFP4_MOE)) {
    if (t.ne.size() < 2 || t.name.find("ffn_gate_inp") != std::string::npos) {
      EXPECT_EQ(t.type, GgmlType::F32) << t.name;
    } else if (t.ne.size() > 2 && t.ne[2] > 1) {
      EXPECT_EQ(t.type, GgmlType::MXFP4) << t.name;
      ++experts;
    } else {
      EXPECT_EQ(t.type, GgmlType::Q8_0) << t.name;  // attention, the head (tied embedding)
    }
  }
  EXPECT_EQ(experts, 3 * 2);  // gate, up, down in each of 2 layers
  // A dense model has no 3-D matrix: all q8_0.
  for (const auto& t : plan_tensors(find_preset("qwen3-tiny"), FileType::MostlyMXFP4_MOE))
    if (t.ne.size() >= 2) {
      EXPECT_EQ(t.type, GgmlType::Q8_0) << t.name;
    }
}

ModelShape small_moe_shape() {
  ModelShape s = find_preset("qwen3moe-micro");
  s.name = "qwen3moe-mxfp4-test";
  s.n_vocab = 512;
  return s;
}

TEST(Mxfp4MkModel, MoeModelLoadsAndDecodesNearItsF16Twin) {
  const std::vector<Token> prompt = {5, 17, 300, 42, 99, 7, 250};
  const std::string f16_path = test::write_model(small_moe_shape(), FileType::MostlyF16, "mxfp4");
  const std::vector<float> want = test::logits_of(f16_path, prompt);
  std::filesystem::remove(f16_path);
  const std::string path = test::write_model(small_moe_shape(), FileType::MostlyMXFP4_MOE, "mxfp4");
  {
    const auto reader = gguf::Reader::open(path);
    EXPECT_EQ(reader->metadata().get_uint("general.file_type"), 38u);
    for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.1.ffn_down_exps.weight"}) {
      const gguf::TensorInfo* t = reader->find_tensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->type, GgmlType::MXFP4) << name;
    }
  }
  const std::vector<float> got = test::logits_of(path, prompt);
  // The expert matmuls give every output one chain of its own: the thread count changes no bit.
  const std::vector<float> one_thread = test::logits_of(path, prompt, 1);
  std::filesystem::remove(path);
  ASSERT_EQ(got.size(), one_thread.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], one_thread[i]) << "logit " << i;
  const double cosine = test::logits_cosine(got, want);
  std::printf("mxfp4_moe logits' cosine similarity to the f16 model's: %.4f\n", cosine);
  EXPECT_GT(cosine, 0.9);
}

}  // namespace
}  // namespace agentkv::mkmodel
