// agentkv bench vision: how long the vision projector takes to encode a screenshot.
//   agentkv bench vision --mmproj P.gguf [--size 1280x720] [--image F] [-t 2] [-r 3]
// A synthetic screenshot (gradients and text-like stripes; the encoder's cost does not depend on
// the pixels) of each --size, or the --image files, preprocessed as llama.cpp's mtmd does and
// encoded r times; reports the preprocessed size, the merged tokens, the best and mean encode time
// and tokens per second (llama-bench's figure of merit for prefill).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/vision.h"
#include "tools/args.h"
#include "tools/bench_common.h"
#include "tools/bench_modes.h"

namespace agentkv::tools {

int bench_vision(Args& a) {
  if (a.flag("--help", "-h")) {
    std::puts("usage: agentkv bench vision --mmproj P.gguf [--size 1280x720[,WxH...]] [--image F ...] [-t 2] [-r 3]");
    return 0;
  }
  const std::string mmproj = a.str("--mmproj", "-mm", "");
  const std::string sizes = a.str("--size", "", "");
  std::vector<std::string> files;
  for (std::string f; !(f = a.str("--image", "", "")).empty();) files.push_back(f);
  const int threads = static_cast<int>(a.num("-t", "--threads", 2));
  const int reps = static_cast<int>(std::max<long long>(1, a.num("-r", "--repetitions", 3)));
  a.finish();
  if (mmproj.empty()) throw std::invalid_argument("--mmproj is required");
  auto vision = VisionEncoder::load(mmproj, threads);
  vision->set_cache_bytes(0);  // every repetition encodes

  struct Input {
    std::string name;
    std::vector<uint8_t> bytes;  // a file, or
    std::vector<uint8_t> rgb;    // synthetic pixels
    int w = 0, h = 0;
  };
  std::vector<Input> inputs;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw Error(f + ": cannot open");
    inputs.push_back({f, std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}), {}, 0, 0});
  }
  std::string list = sizes.empty() && files.empty() ? "1280x720" : sizes;
  for (size_t from = 0; !list.empty() && from <= list.size();) {
    const size_t comma = std::min(list.find(',', from), list.size());
    const std::string s = list.substr(from, comma - from);
    int w = 0, h = 0;
    if (!parse_screen_size(s, w, h))
      throw std::invalid_argument("--size: '" + s + "' is not WIDTHxHEIGHT");
    inputs.push_back({"synthetic " + s, {}, synthetic_screen(w, h), w, h});
    from = comma + 1;
  }
  std::printf("| image | pixels | tokens | threads | best ms | mean ms | tokens/s |\n|---|---|---|---|---|---|---|\n");
  for (const Input& in : inputs) {
    double best = 1e30, sum = 0;
    ImageEmbedding e;
    for (int r = 0; r < reps; ++r) {
      e = in.bytes.empty() ? vision->encode_rgb(in.rgb.data(), in.w, in.h) : vision->encode(in.bytes.data(), in.bytes.size());
      const double s = e.decode_seconds + e.encode_seconds;
      best = std::min(best, s);
      sum += s;
    }
    std::printf("| %s | %lldx%lld | %lld | %d | %.1f | %.1f | %.1f |\n", in.name.c_str(), static_cast<long long>(e.pixels_x),
                static_cast<long long>(e.pixels_y), static_cast<long long>(e.n_tokens), threads, best * 1e3,
                sum / reps * 1e3, e.n_tokens / best);
  }
  return 0;
}

}  // namespace agentkv::tools
