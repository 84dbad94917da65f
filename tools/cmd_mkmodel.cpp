// agentkv mkmodel: writes a random-weight GGUF of a named shape, with the metadata, tensor names,
// shapes and types llama.cpp's converter / llama-quantize would write for the real model.
//   agentkv mkmodel --preset qwen3-0.6b --type q4_k_m --seed 1 -o qwen3-0.6b-q4_k_m.gguf
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "agentkv/error.h"
#include "agentkv/make_model.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace agentkv::tools {
namespace {

void usage() {
  std::fprintf(stderr,
               "usage: agentkv mkmodel --preset NAME [--type T] [--seed N] -o FILE\n"
               "                       [--tokenizer tokenizer.json] [--tokenizer-config tokenizer_config.json]\n"
               "                       [--threads N] | --list\n"
               "       agentkv mkmodel --shape shape.json --weights DIR --tokenizer tokenizer.json -o FILE\n"
               "  --type       f16 (default) | q8_0 | q4_k_m | q5_k_m | f32 | iq4_xs | iq3_s | iq3_xxs |\n"
               "               iq2_xxs | iq2_xs | iq2_s | mxfp4_moe (experts in mxfp4, the rest q8_0)\n"
               "  --seed       weights are a function of the seed only (default 42)\n"
               "  --tokenizer  Hugging Face tokenizer.json (or its folder); default $AGENTKV_TOKENIZER,\n"
               "               then the fixture tokenizer of the source tree\n"
               "  --list       print the presets\n"
               "  --shape      a qwen3 shape (JSON: a preset as \"base\" plus the fields that differ)\n"
               "  --weights    trained weights: DIR/<tensor name>.f32 per tensor (tools/train/export.py)\n");
}

void list_presets() {
  for (const auto& p : mkmodel::presets()) {
    int64_t n_params = 0;
    for (const auto& t : mkmodel::plan_tensors(p, mkmodel::FileType::MostlyF16)) n_params += t.n_elements();
    std::printf("%-18s %-10s %8.1fM params  %s\n", p.name.c_str(), p.arch.c_str(), n_params / 1e6,
                p.description.c_str());
  }
  for (const auto& v : mkmodel::vision_presets())
    std::printf("%-18s %-10s %8.1fM params  %s\n", v.name.c_str(), "mmproj", v.n_params() / 1e6, v.description.c_str());
}

int cmd_mkmodel(const std::vector<std::string>& argv) {
  Args a(argv);
  if (a.flag("--help", "-h")) {
    usage();
    return 0;
  }
  if (a.flag("--list")) {
    a.finish();
    list_presets();
    return 0;
  }
  const std::string preset_name = a.str("--preset", "-p", "");
  const std::string type_name = a.str("--type", "-t", "f16");
  const long long seed = a.num("--seed", "-s", 42);
  const std::string out_path = a.str("--output", "-o", "");
  const std::string tokenizer_arg = a.str("--tokenizer", "", "");
  std::string tokenizer_config = a.str("--tokenizer-config", "", "");
  const long long n_threads = a.num("--threads", "", 0);
  const std::string shape_path = a.str("--shape", "", "");
  const std::string weights_dir = a.str("--weights", "", "");
  a.finish();
  if ((preset_name.empty() == shape_path.empty()) || out_path.empty()) {
    usage();
    return 1;
  }
  if (seed < 0) throw std::invalid_argument("--seed must be non-negative");

  if (const mkmodel::VisionShape* vision = mkmodel::find_vision_preset(preset_name)) {
    if (type_name != "f16") throw Error("vision projector presets are written in f16 (the converter's type)");
    const auto t0 = std::chrono::steady_clock::now();
    const mkmodel::BuildStats stats =
        write_vision_file(out_path, *vision, static_cast<uint64_t>(seed), static_cast<int>(n_threads));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %s: %s (vision projector qwen3vl_merger for %s), %zu tensors, %.2fM params, %.1f MiB, seed %lld, %.1f s\n",
                out_path.c_str(), vision->name.c_str(), vision->language_model.c_str(), stats.n_tensors,
                stats.n_params / 1e6, stats.tensor_bytes / (1024.0 * 1024.0), seed, seconds);
    return 0;
  }
  const mkmodel::ModelShape shape =
      shape_path.empty() ? mkmodel::find_preset(preset_name) : mkmodel::shape_from_json(shape_path);
  const auto type = mkmodel::file_type_from_name(type_name);
  if (!type) throw Error("unknown --type '" + type_name + "' (f16, q8_0, q4_k_m, q5_k_m, f32, iq4_xs, iq3_s, iq3_xxs, iq2_xxs, iq2_xs, iq2_s, mxfp4_moe)");

  const std::string tokenizer_json = mkmodel::find_tokenizer_json(tokenizer_arg);
  if (tokenizer_config.empty()) tokenizer_config = mkmodel::sibling_tokenizer_config(tokenizer_json);
  const VocabData vocab = mkmodel::load_vocab(tokenizer_json, tokenizer_config);

  const auto t0 = std::chrono::steady_clock::now();
  mkmodel::BuildOptions options;
  options.type = *type;
  options.seed = static_cast<uint64_t>(seed);
  options.n_threads = static_cast<int>(n_threads);
  options.weights_dir = weights_dir;
  // One line when generation starts; a live tensor counter only on a terminal.
  int64_t planned_params = 0;
  const auto plan = mkmodel::plan_tensors(shape, *type);
  for (const auto& t : plan) planned_params += t.n_elements();
  std::fprintf(stderr, "mkmodel: %s (%s, %s): %zu tensors, %.2fM params, seed %lld\n", shape.name.c_str(),
               shape.arch.c_str(), type_name.c_str(), plan.size(), planned_params / 1e6, seed);
  if (isatty(fileno(stderr))) {
    options.progress = [](size_t i, size_t n, const mkmodel::PlannedTensor& t) {
      std::fprintf(stderr, "\r[%zu/%zu] %-48s", i + 1, n, t.name.c_str());
      if (i + 1 == n) std::fprintf(stderr, "\n");
    };
  }
  const mkmodel::BuildStats stats = write_model_file(out_path, shape, vocab, options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  const auto file_bytes = std::filesystem::file_size(out_path, ec);
  std::printf("wrote %s: %s (%s, %s), %zu tensors, %.2fM params, %.1f MiB, seed %lld, %.1f s\n",
              out_path.c_str(), shape.name.c_str(), shape.arch.c_str(), type_name.c_str(), stats.n_tensors,
              stats.n_params / 1e6, (ec ? stats.tensor_bytes : file_bytes) / (1024.0 * 1024.0), seed, seconds);
  return 0;
}

Registrar reg("mkmodel", [](const std::vector<std::string>& args) {
  try {
    return cmd_mkmodel(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentkv mkmodel: %s\n", e.what());
    return 1;
  }
});

}  // namespace
}  // namespace agentkv::tools
