// `agentkv mkmodel --type iq4_xs | iq3_s | iq3_xxs | iq2_xxs | iq2_xs | iq2_s`: the type names, the
// mix (every quantized matrix in the type, the output head q6_K, short rows iq4_nl), and a written
// model of each type that loads and decodes to finite logits close to its f16 twin's.
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

const struct {
  FileType file_type;
  GgmlType type;
  const char* name;
  double min_cosine;  // of the logits to the f16 model's (random weights: errors grow layer by layer)
} kIqFiles[] = {{FileType::MostlyIQ4_XS, GgmlType::IQ4_XS, "iq4_xs", 0.93},  {FileType::MostlyIQ3_S, GgmlType::IQ3_S, "iq3_s", 0.8},
                {FileType::MostlyIQ3_XXS, GgmlType::IQ3_XXS, "iq3_xxs", 0.7}, {FileType::MostlyIQ2_XXS, GgmlType::IQ2_XXS, "iq2_xxs", 0.5},
                {FileType::MostlyIQ2_XS, GgmlType::IQ2_XS, "iq2_xs", 0.5},    {FileType::MostlyIQ2_S, GgmlType::IQ2_S, "iq2_s", 0.55}};

TEST(IqMkModel, TypeNamesAndLlamaFileTypeIds) {
  const uint32_t llama_ids[] = {30, 26, 23, 19, 20, 28};  // LLAMA_FTYPE_MOSTLY_*
  for (size_t i = 0; i < std::size(kIqFiles); ++i) {
    EXPECT_EQ(file_type_from_name(kIqFiles[i].name), kIqFiles[i].file_type);
    EXPECT_EQ(file_type_name(kIqFiles[i].file_type), kIqFiles[i].name);
    EXPECT_EQ(static_cast<uint32_t>(kIqFiles[i].file_type), llama_ids[i]);
    EXPECT_TRUE(is_quantized_file_type(kIqFiles[i].file_type));
  }
  EXPECT_EQ(file_type_from_name("IQ4_XS"), FileType::MostlyIQ4_XS);
}

TEST(IqMkModel, MixPutsTheTypeInEveryQuantizedMatrix) {
  for (const auto& f : kIqFiles) {
    for (const auto& t : plan_tensors(find_preset("qwen3-tiny"), f.file_type)) {
      if (t.ne.size() < 2) {
        EXPECT_EQ(t.type, GgmlType::F32) << t.name;
      } else if (t.name == "token_embd.weight") {  // tied: the output head
        EXPECT_EQ(t.type, GgmlType::Q6_K) << f.name;
      } else {
        EXPECT_EQ(t.type, f.type) << f.name << " " << t.name;
      }
    }
    // Rows of 64 (qwen3-micro) are not whole 256-blocks: llama.cpp's fallback, iq4_nl.
    for (const auto& t : plan_tensors(find_preset("qwen3-micro"), f.file_type))
      if (t.ne.size() >= 2 && t.name != "token_embd.weight") {
        EXPECT_EQ(t.type, GgmlType::IQ4_NL) << f.name << " " << t.name;
      }
  }
}

ModelShape small_shape() {
  ModelShape s = find_preset("qwen3-test");
  s.name = "qwen3-iq-test";
  s.n_embd = 256;  // whole 256-element superblocks in every matrix
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_ff = 512;
  s.n_vocab = 512;
  return s;
}

const std::vector<Token> kPrompt = {5, 17, 300, 42, 99};

TEST(IqMkModel, EachTypeLoadsAndDecodesNearItsF16Twin) {
  const std::string f16_path = test::write_model(small_shape(), FileType::MostlyF16, "iq");
  const std::vector<float> want = test::logits_of(f16_path, kPrompt);
  std::filesystem::remove(f16_path);
  for (const auto& f : kIqFiles) {
    const std::string path = test::write_model(small_shape(), f.file_type, "iq");
    {
      const auto reader = gguf::Reader::open(path);
      EXPECT_EQ(reader->metadata().get_uint("general.file_type"), static_cast<uint64_t>(f.file_type));
      const gguf::TensorInfo* down = reader->find_tensor("blk.0.ffn_down.weight");
      ASSERT_NE(down, nullptr);
      EXPECT_EQ(down->type, f.type) << f.name;
    }
    const std::vector<float> got = test::logits_of(path, kPrompt);
    std::filesystem::remove(path);
    const double cosine = test::logits_cosine(got, want);
    std::printf("%-8s logits' cosine similarity to the f16 model's: %.4f\n", f.name, cosine);
    EXPECT_GT(cosine, f.min_cosine) << f.name;
  }
}

}  // namespace
}  // namespace agentkv::mkmodel
