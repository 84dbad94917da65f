// Qwen3-Next files come in two layouts of a DeltaNet layer's input projection: the current
// converter's attn_qkv + attn_gate, and older files' ssm_in, whose rows hold per K head
// [q | k | v (r heads) | z (r heads)]. The same weights in either layout must give the same outputs
// bit for bit (each output element is the same dot product); llama.cpp's outputs are checked on the
// current layout (fidelity_presets_test).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "agentkv/context.h"
#include "agentkv/logits_report.h"
#include "fixture_models.h"
#include "fixtures.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/presets.h"

namespace agentkv {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("agentkv-" + name + "-" + std::to_string(::getpid()) + ".gguf"))
      .string();
}

// The preset as bytes, and a copy whose recurrent layers carry ssm_in instead of attn_qkv + attn_gate.
void write_both_layouts(const std::string& current, const std::string& legacy) {
  const mkmodel::ModelShape shape = mkmodel::find_preset("qwen3next-micro");
  gguf::Writer w;
  mkmodel::build_model(w, shape, testing_support::fixture_vocab(), {});
  w.write(current);

  const auto r = gguf::Reader::open(current);
  gguf::Writer out;
  for (const auto& [key, value] : r->metadata().entries()) out.set_value(key, value);
  const int64_t Hk = shape.ssm_group_count, Dk = shape.ssm_state_size, Vd = shape.ssm_inner_size;
  const int64_t Vk = Vd / Hk;  // V (and z) rows per K head
  for (const auto& t : r->tensors()) {
    const std::string& name = t.name;
    const size_t cut = name.find("attn_gate.weight");
    if (name.find("attn_qkv.weight") != std::string::npos) continue;  // written with its gate
    if (cut == std::string::npos) {
      std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
      out.add_tensor(name, t.type, ne, std::vector<uint8_t>(t.data, t.data + t.nbytes));
      continue;
    }
    const std::string prefix = name.substr(0, cut);
    const gguf::TensorInfo& qkv = *r->find_tensor(prefix + "attn_qkv.weight");
    const size_t row = ggml_row_size(t.type, t.ne[0]);
    std::vector<uint8_t> fused;
    auto rows = [&](const gguf::TensorInfo& src, int64_t first, int64_t n) {
      fused.insert(fused.end(), src.data + first * row, src.data + (first + n) * row);
    };
    for (int64_t h = 0; h < Hk; ++h) {
      rows(qkv, h * Dk, Dk);               // q of K head h
      rows(qkv, Hk * Dk + h * Dk, Dk);     // k
      rows(qkv, 2 * Hk * Dk + h * Vk, Vk); // v of its V heads
      rows(t, h * Vk, Vk);                 // z of its V heads
    }
    out.add_tensor(prefix + "ssm_in.weight", t.type, {t.ne[0], qkv.ne[1] + t.ne[1]}, std::move(fused));
  }
  out.write(legacy);
}

TEST(Qwen3NextLayout, SsmInGivesTheOutputsOfAttnQkvAndGate) {
  AGENTKV_NEEDS_FIXTURES();
  const std::string current = temp_path("next-current"), legacy = temp_path("next-legacy");
  write_both_layouts(current, legacy);
  auto a = Model::load(current);
  auto b = Model::load(legacy);
  ASSERT_TRUE(b->config().arch == Arch::Qwen3Next);
  std::filesystem::remove(current);
  std::filesystem::remove(legacy);
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_threads = 2;
  Context ca(*a, cp), cb(*b, cp);
  for (const char* prompt : {"Agents call tools and read their results.", "x = [1, 2, 3]\nprint(sum(x))"}) {
    const LogitsCase x = compute_logits_case(ca, prompt, 10, 8);
    const LogitsCase y = compute_logits_case(cb, prompt, 10, 8);
    ASSERT_EQ(x.prompt_top.size(), y.prompt_top.size());
    for (size_t i = 0; i < x.prompt_top.size(); ++i) EXPECT_EQ(x.prompt_top[i], y.prompt_top[i]) << i;
    EXPECT_EQ(x.generated, y.generated);
  }
}

}  // namespace
}  // namespace agentkv
