// agentkv logits -m M.gguf --prompts prompts.txt [--top 10] [--n-gen 32] [-t 2] [-ub 512] [-c N] [-ctk T -ctv T]
//                [--mmproj P --image F ...]
// Prints a JSON report in the fixtures' format so any GGUF can be compared with llama.cpp. With a
// projector, each "<__media__>" of the prompts takes the next --image (in order, over all prompts):
// its rows sit in prompt_tokens as the negative ids the prefix index keys them by (image_row_token),
// with their top-k like any prompt position.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>

#include "agentkv/error.h"
#include "agentkv/logits_report.h"
#include "tools/args.h"
#include "tools/kv_flags.h"
#include "tools/commands.h"

namespace agentkv::tools {
namespace {

std::vector<uint8_t> read_image_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("--image " + path + ": cannot open");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

int cmd_logits(const std::vector<std::string>& argv) {
  Args a(argv);
  if (a.flag("--help", "-h")) {
    std::puts("usage: agentkv logits -m MODEL --prompts FILE [--top 10] [--n-gen 32] [-t 2] [-ub 512] [-c 4096]\n"
              "                     [-ctk f16] [-ctv f16] [--kv-rotation auto|on|off] [--kv-rotation-seed N]\n"
              "                     [--mmproj P --image F [--image F ...]]\n"
              "  With --mmproj, each <__media__> in the prompts takes the next --image, in order.");
    return 0;
  }
  const std::string model_path = a.str("-m", "--model", "");
  const std::string prompts_path = a.str("--prompts", "", "");
  const int top = static_cast<int>(a.num("--top", "", 10));
  const int n_gen = static_cast<int>(a.num("--n-gen", "", 32));
  const std::string mmproj = a.str("--mmproj", "-mm", "");
  std::vector<std::string> images;
  for (std::string f; !(f = a.str("--image", "", "")).empty();) images.push_back(f);
  ContextParams cp;
  cp.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  cp.n_ubatch = static_cast<uint32_t>(a.num("-ub", "--ubatch-size", 512));
  cp.n_ctx = static_cast<uint32_t>(a.num("-c", "--ctx-size", 4096));
  cp.kv = read_kv_flags(a);
  a.finish();
  if (model_path.empty() || prompts_path.empty()) throw std::invalid_argument("-m and --prompts are required");
  if (mmproj.empty() != images.empty()) throw std::invalid_argument("--mmproj and --image go together");

  auto model = Model::load(model_path);
  std::unique_ptr<VisionEncoder> vision;
  if (!mmproj.empty()) {
    vision = VisionEncoder::load(mmproj, cp.n_threads);
    vision->check_language_model(*model);
  }
  Context ctx(*model, cp);
  std::vector<LogitsCase> cases;
  size_t next_image = 0;
  for (const auto& p : read_prompts_file(prompts_path)) {
    if (!vision) {
      cases.push_back(compute_logits_case(ctx, p, top, n_gen));
      continue;
    }
    std::vector<std::vector<uint8_t>> bytes;
    for (size_t k = 1; k < text_pieces_around_images(p).size(); ++k) {
      if (next_image == images.size()) throw std::invalid_argument("the prompts have more <__media__> markers than --image files");
      bytes.push_back(read_image_file(images[next_image++]));
    }
    cases.push_back(compute_image_logits_case(ctx, *vision, p, bytes, top, n_gen));
  }
  if (next_image != images.size())
    throw std::invalid_argument(std::to_string(images.size() - next_image) + " --image file(s) left over: the prompts have " +
                                std::to_string(next_image) + " <__media__> markers");
  std::cout << to_json(cases).dump() << "\n";
  return 0;
}

Registrar reg("logits", [](const std::vector<std::string>& args) {
  try {
    return cmd_logits(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentkv logits: %s\n", e.what());
    return 1;
  }
});

}  // namespace
}  // namespace agentkv::tools
