// The Qwen3.5 / Qwen3-VL vision path against llama.cpp's mtmd (tests/data/vision/reference/ at the AVX-512
// level, reference-avx2/ otherwise, made by tests/reference/mtmd_reference.cpp from the projector presets and the qwen35
// fixtures or the qwen3vl presets, whose towers have deepstack mergers): the
// projector's image embeddings of the PNG files (decoded and preprocessed by agentkv), then the
// language model's next-token logprobs and greedy tokens after a text + image (+ image) + text prompt, fed with
// agentkv's embeddings at the multi-axis rope positions mtmd gives them. Each distance must be no
// larger than llama.cpp's own between its two runs (flash attention on / off).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "agentkv/context.h"
#include "agentkv/logits_report.h"
#include "agentkv/make_model.h"
#include "agentkv/vision.h"
#include "fidelity_common.h"
#include "fixture_models.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"

namespace agentkv::testing {
namespace {

const std::string kVisionData = std::string(AGENTKV_SOURCE_DIR) + "/tests/data/vision/";

// Each kernel level against llama.cpp run on its own kind of machine, as reference_dir() does for
// the text fixtures: the AVX-512 kernels against reference/ (made on an AVX-512 machine), the AVX2 and
// scalar ones against reference-avx2/; a case with no AVX-512 reference falls back to the AVX2 one.
std::string vision_reference_dir(const std::string& name) {
  const std::string avx512 = kVisionData + "reference/";
  if (active_cpu_level() == CpuLevel::Avx512 && std::filesystem::exists(avx512 + name + "/result.json"))
    return avx512;
  if (active_cpu_level() == CpuLevel::Avx512) std::printf("%s: no AVX-512 reference: judged against the AVX2 one\n", name.c_str());
  return kVisionData + "reference-avx2/";
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  in.seekg(0, std::ios::end);
  std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

struct Distance {
  double max_abs = 0, mean_abs = 0;
};
Distance distance(const std::vector<float>& a, const std::vector<float>& b) {
  Distance d;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - b[i]);
    d.max_abs = std::max(d.max_abs, e);
    d.mean_abs += e;
  }
  if (!a.empty()) d.mean_abs /= static_cast<double>(a.size());
  return d;
}

// The reference's case: its prompt's logprobs after the last token and its greedy continuation.
LogitsCase reference_case(const nlohmann::json& r) {
  LogitsCase c;
  const auto top = [](const nlohmann::json& list) {
    TopList t;
    for (const auto& e : list) t.emplace_back(e[0].get<Token>(), e[1].get<float>());
    return t;
  };
  c.prompt_top.push_back(top(r["prompt_top"]));
  for (const auto& g : r["generated"]) c.generated.push_back(g.get<Token>());
  for (const auto& g : r["generated_top"]) c.generated_top.push_back(top(g));
  return c;
}

TopList top_of(const float* logits, int64_t n_vocab) {
  std::vector<int32_t> ids(10);
  std::vector<float> lp(10);
  const int n = top_k_logprobs(logits, n_vocab, 10, ids.data(), lp.data());
  TopList t;
  for (int i = 0; i < n; ++i) t.emplace_back(ids[i], lp[i]);
  return t;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("agentkv-" + name + "-" + std::to_string(::getpid()) + ".gguf")).string();
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Our run of one reference case through the public path: each image file decoded, preprocessed
// and encoded (agentkv/vision.h), the prompt laid out by add_text / add_image, then the reference's
// greedy tokens fed back (teacher forcing) or our own argmax.
LogitsCase run_case(const Model& lm, const VisionEncoder& vision, const nlohmann::json& r,
                    std::vector<ImageEmbedding>* images, bool teacher_forcing) {
  images->clear();
  for (const auto& img : r["images"]) {
    const std::vector<uint8_t> bytes = read_bytes(std::string(AGENTKV_SOURCE_DIR) + "/" + img["file"].get<std::string>());
    images->push_back(vision.encode(bytes.data(), bytes.size()));
    EXPECT_EQ(images->back().pixels_x, img["pixels_nx"].get<int64_t>());
    EXPECT_EQ(images->back().pixels_y, img["pixels_ny"].get<int64_t>());
  }
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_threads = 2;
  Context ctx(lm, cp);
  Batch b;
  PromptCursor cursor;
  for (const auto& chunk : r["chunks"]) {
    if (chunk["kind"] == "text") {
      const std::vector<Token> tokens = chunk["tokens"].get<std::vector<Token>>();
      add_text(b, tokens.data(), tokens.size(), 0, cursor, false);
    } else {
      const ImageEmbedding& image = (*images)[chunk["image"].get<size_t>()];
      EXPECT_EQ(image.grid_x, chunk["grid_nx"].get<int64_t>());
      EXPECT_EQ(image.grid_y, chunk["grid_ny"].get<int64_t>());
      add_image(b, image, 0, cursor);
    }
  }
  EXPECT_EQ(cursor.rope, r["n_past_end"].get<int32_t>());
  b.output.back() = true;
  EXPECT_EQ(ctx.decode(b), 0);
  LogitsCase c;
  c.prompt_top.push_back(top_of(ctx.logits(0), lm.n_vocab()));
  const LogitsCase ref = reference_case(r);
  Token next = c.prompt_top[0][0].first;
  for (size_t i = 0; i < ref.generated.size(); ++i) {
    const Token t = teacher_forcing ? ref.generated[i] : next;
    if (i > 0) c.generated_top.push_back(top_of(ctx.logits(0), lm.n_vocab()));
    else c.generated_top.push_back(c.prompt_top[0]);
    c.generated.push_back(t);
    Batch g;
    add_text(g, &t, 1, 0, cursor, true);
    EXPECT_EQ(ctx.decode(g), 0);
    next = top_of(ctx.logits(0), lm.n_vocab())[0].first;
  }
  return c;
}

// lm_name: a fixture model, or (from_preset) a preset exactly as `agentkv mkmodel --preset` writes it.
void check_vision_case(const std::string& name, const std::string& lm_name, const std::string& projector,
                       bool from_preset = false) {
  AGENTKV_NEEDS_FIXTURES();
  if (std::string why; lower_level_run_is_redundant(&why)) GTEST_SKIP() << why;
  // Judged against the run with flash attention on (the .alt directory), which is what llama.cpp's
  // default (auto) picks on a CPU and what agentkv computes (F16 K/V in the vision tower and the
  // cache); the run with it off (and 2 threads, batch 512) measures llama.cpp's own spread.
  const std::string ref_dir = vision_reference_dir(name);
  const std::string dir = ref_dir + name + ".alt/";
  const std::string alt_dir = ref_dir + name + "/";
  const nlohmann::json ref = read_json(dir + "result.json");
  const nlohmann::json alt = read_json(alt_dir + "result.json");

  const std::string path = temp_path(projector);
  write_vision_file(path, *mkmodel::find_vision_preset(projector), 42, 2);
  auto vision = VisionEncoder::load(path, 2);
  std::filesystem::remove(path);  // the mapping keeps the data
  auto lm = from_preset ? testing_support::preset_model(lm_name, "vision")
                        : Model::load(kFixtures + "/models/" + lm_name + ".gguf");
  vision->check_language_model(*lm);

  std::vector<ImageEmbedding> ours;
  const LogitsCase forced = run_case(*lm, *vision, ref, &ours, true);
  for (size_t k = 0; k < ours.size(); ++k) {
    const std::string file = ref["images"][k]["embd_file"];
    const Distance d = distance(ours[k].rows, read_floats(dir + file));
    const Distance llama = distance(read_floats(alt_dir + file), read_floats(dir + file));
    std::printf("%s image %zu embeddings [%s]: agentkv max %.5f mean %.6f | llama.cpp alt max %.5f mean %.6f\n",
                name.c_str(), k, std::string(cpu_level_name(active_cpu_level())).c_str(), d.max_abs, d.mean_abs,
                llama.max_abs, llama.mean_abs);
    EXPECT_LE(d.max_abs, llama.max_abs);
    EXPECT_LE(d.mean_abs, llama.mean_abs);
  }
  const LogitsDistance d = logits_distance({forced}, {reference_case(ref)});
  const LogitsDistance llama = logits_distance({reference_case(alt)}, {reference_case(ref)});
  std::printf("%s logprobs: agentkv max %.4f mean %.5f top1 %d/%d | llama.cpp alt max %.4f mean %.5f top1 %d/%d\n",
              name.c_str(), d.max_abs, d.mean_abs, d.top1_agree, d.n_positions, llama.max_abs, llama.mean_abs,
              llama.top1_agree, llama.n_positions);
  EXPECT_LE(d.max_abs, llama.max_abs);
  EXPECT_LE(d.mean_abs, llama.mean_abs);
  EXPECT_GE(d.top1_agree, llama.top1_agree);

  const LogitsCase free = run_case(*lm, *vision, ref, &ours, false);
  const LogitsCase r = reference_case(ref), a = reference_case(alt);
  for (size_t i = 0; i < r.generated.size() && r.generated[i] == a.generated[i]; ++i)
    EXPECT_EQ(free.generated[i], r.generated[i]) << name << " greedy step " << i;
}

TEST(FidelityVision, Qwen35MicroOneImage) { check_vision_case("qwen35-micro-vision.1img", "qwen35-micro", "qwen35-micro-vision"); }
TEST(FidelityVision, Qwen35MicroTwoImages) { check_vision_case("qwen35-micro-vision.2img", "qwen35-micro", "qwen35-micro-vision"); }
TEST(FidelityVision, Qwen35MoeMicroTwoImages) {
  check_vision_case("qwen35moe-micro-vision.2img", "qwen35moe-micro", "qwen35moe-micro-vision");
}

// Qwen3-VL: the towers' deepstack mergers write three slices per image token, the language model
// adds the second and third to its first two layers' outputs.
TEST(FidelityVision, Qwen3VLMicroOneImage) {
  check_vision_case("qwen3vl-micro-vision.1img", "qwen3vl-micro", "qwen3vl-micro-vision", true);
}
TEST(FidelityVision, Qwen3VLMicroTwoImages) {
  check_vision_case("qwen3vl-micro-vision.2img", "qwen3vl-micro", "qwen3vl-micro-vision", true);
}
TEST(FidelityVision, Qwen3VLMoeMicroTwoImages) {
  check_vision_case("qwen3vlmoe-micro-vision.2img", "qwen3vlmoe-micro", "qwen3vlmoe-micro-vision", true);
}

// Qwen3.5's real vision tower (qwen35moe-bench-vision: 27 layers of width 1152) on the 64 x 48
// PNG (12 merged tokens of 4 patches): its embeddings against llama.cpp's (the language model of
// that reference is a random q8_0 qwen35moe-bench whose logprobs are not compared).
TEST(FidelityVision, RealShapeProjectorEmbeddings) {
  AGENTKV_NEEDS_FIXTURES();
  if (std::string why; lower_level_run_is_redundant(&why)) GTEST_SKIP() << why;
  const std::string name = "qwen35moe-bench-vision.1img";
  const std::string ref_dir = vision_reference_dir(name);
  const std::string dir = ref_dir + name + ".alt/";
  const std::string alt_dir = ref_dir + name + "/";
  const std::string path = temp_path("qwen35moe-bench-vision");
  write_vision_file(path, *mkmodel::find_vision_preset("qwen35moe-bench-vision"), 42, 2);
  auto vision = VisionEncoder::load(path, 2);
  std::filesystem::remove(path);  // the mapping keeps the data
  const std::vector<uint8_t> png = read_bytes(kVisionData + "mtmdref-64x48.png");
  const ImageEmbedding ours = vision->encode(png.data(), png.size());
  EXPECT_EQ(ours.n_tokens, 12);
  const Distance d = distance(ours.rows, read_floats(dir + "embd-0.bin"));
  const Distance llama = distance(read_floats(alt_dir + "embd-0.bin"), read_floats(dir + "embd-0.bin"));
  std::printf("qwen35moe-bench-vision embeddings [%s]: agentkv max %.5f mean %.6f | llama.cpp alt max %.5f mean %.6f\n",
              std::string(cpu_level_name(active_cpu_level())).c_str(), d.max_abs, d.mean_abs, llama.max_abs, llama.mean_abs);
  EXPECT_LE(d.max_abs, llama.max_abs);
  EXPECT_LE(d.mean_abs, llama.mean_abs);
}

// What the public path refuses, with a reason a user can act on.
TEST(VisionEncoderInput, RefusesMismatchedModelsAndBadImages) {
  AGENTKV_NEEDS_FIXTURES();
  const std::string path = temp_path("refusals");
  write_vision_file(path, *mkmodel::find_vision_preset("qwen35-micro-vision"), 42, 1);
  auto vision = VisionEncoder::load(path, 1);
  std::filesystem::remove(path);
  const auto message = [](const auto& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(nothing thrown)");
  };
  auto text_only = Model::load(kFixtures + "/models/qwen3-micro.gguf");  // width 64 too, no image input
  EXPECT_NE(message([&] { vision->check_language_model(*text_only); }).find("takes no image input"), std::string::npos);
  auto hybrid = Model::load(kFixtures + "/models/qwen35-micro.gguf");
  EXPECT_EQ(message([&] { vision->check_language_model(*hybrid); }), "(nothing thrown)");
  const std::vector<uint8_t> garbage = {'G', 'I', 'F', '8', '9', 'a', 1, 2, 3};
  EXPECT_NE(message([&] { vision->encode(garbage.data(), garbage.size()); }).find("GIF"), std::string::npos);
  EXPECT_NE(message([&] { vision->encode(nullptr, 0); }), "(nothing thrown)");
  std::vector<uint8_t> png = read_bytes(kVisionData + "mtmdref-64x48.png");
  png.resize(png.size() / 2);  // truncated
  EXPECT_NE(message([&] { vision->encode(png.data(), png.size()); }), "(nothing thrown)");
  // A batch with image rows for a model without image input is refused before anything runs.
  ContextParams cp;
  cp.n_ctx = 64;
  Context ctx(*text_only, cp);
  Batch b;
  PromptCursor cursor;
  const Token t = 1;
  add_text(b, &t, 1, 0, cursor, true);
  EXPECT_NE(message([&] { ctx.decode(b); }).find("takes no image input"), std::string::npos);
}

}  // namespace
}  // namespace agentkv::testing
