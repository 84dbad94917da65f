// `agentkv mkmodel --type iq4_xs | iq3_s | iq3_xxs | iq2_xxs | iq2_xs | iq2_s`: the type names, the
// mix (every quantized matrix in the type, the output head q6_K, short rows iq4_nl), and a written
// model of each type that loads and decodes to finite logits close to its f16 twin's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "agentkv/batch.h"
#include "agentkv/context.h"
#include "agentkv/model.h"
#include "gguf/gguf.h"
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

// A small vocabulary (no tokenizer file needed: decoding takes token ids) keeps the head small.
VocabData small_vocab(int n) {
  VocabData v;
  for (int i = 0; i < n; ++i) {
    v.tokens.push_back("tok" + std::to_string(i));
    v.types.push_back(TokenType::Normal);
  }
  v.merges = {"t o", "to k"};
  v.bos = 0;
  v.eos = 1;
  return v;
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

std::vector<float> logits_of(const std::string& path) {
  const auto model = Model::load(path);
  ContextParams params;
  params.n_ctx = 64;
  Context ctx(*model, params);
  Batch b;
  const std::vector<Token> prompt = {5, 17, 300, 42, 99};
  b.add_sequence(prompt.data(), prompt.size(), 0, 0, true);
  EXPECT_EQ(ctx.decode(b), 0);
  return std::vector<float>(ctx.last_logits(), ctx.last_logits() + model->n_vocab());
}

std::string write_model(FileType type) {
  gguf::Writer w;
  BuildOptions o;
  o.type = type;
  o.seed = 9;
  o.n_threads = 2;
  build_model(w, small_shape(), small_vocab(500), o);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("agentkv-iq-" + std::string(file_type_name(type)) + "-" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  w.write(path);
  return path;
}

TEST(IqMkModel, EachTypeLoadsAndDecodesNearItsF16Twin) {
  const std::string f16_path = write_model(FileType::MostlyF16);
  const std::vector<float> want = logits_of(f16_path);
  std::filesystem::remove(f16_path);
  for (const auto& f : kIqFiles) {
    const std::string path = write_model(f.file_type);
    {
      const auto reader = gguf::Reader::open(path);
      EXPECT_EQ(reader->metadata().get_uint("general.file_type"), static_cast<uint64_t>(f.file_type));
      const gguf::TensorInfo* down = reader->find_tensor("blk.0.ffn_down.weight");
      ASSERT_NE(down, nullptr);
      EXPECT_EQ(down->type, f.type) << f.name;
    }
    const std::vector<float> got = logits_of(path);
    std::filesystem::remove(path);
    ASSERT_EQ(got.size(), want.size());
    double dot = 0, gg = 0, ww = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << f.name << " logit " << i;
      dot += static_cast<double>(got[i]) * want[i];
      gg += static_cast<double>(got[i]) * got[i];
      ww += static_cast<double>(want[i]) * want[i];
    }
    const double cosine = dot / std::sqrt(gg * ww);
    std::printf("%-8s logits' cosine similarity to the f16 model's: %.4f\n", f.name, cosine);
    EXPECT_GT(cosine, f.min_cosine) << f.name;
  }
}

}  // namespace
}  // namespace agentkv::mkmodel
