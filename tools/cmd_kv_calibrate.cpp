// agentkv kv-calibrate -m MODEL -f TEXT -o CODE [--window 1024] [--windows 24] [--skip N] [-t 2]
// Fits the calibrated code the tqc3 KV type writes its rows under (agentkv/kv_code.h) to the
// model's own K / V rows and queries over TEXT, and writes it to CODE.
#include <cstdio>

#include "agentkv/error.h"
#include "agentkv/kv_code.h"
#include "agentkv/model.h"
#include "tools/args.h"
#include "tools/bench_common.h"
#include "tools/commands.h"

namespace agentkv::tools {
namespace {

int cmd_kv_calibrate(const std::vector<std::string>& argv) {
  Args a(argv);
  if (a.flag("--help", "-h")) {
    std::puts(
        "usage: agentkv kv-calibrate -m MODEL -f TEXT -o CODE [--window 1024] [--windows 24] [--skip 0] [-t 2]\n"
        "  fits the calibrated code of the tqc3 KV type (-ctk/-ctv tqc3 --kv-code CODE) to the model's own\n"
        "  K/V rows and queries over TEXT: --windows windows of --window positions, after --skip tokens\n"
        "  (keep them apart from the text you measure on). docs/quant-types.md, \"Calibrated code\"");
    return 0;
  }
  const std::string model_path = a.str("-m", "--model", "");
  const std::string text_path = a.str("-f", "--file", "");
  const std::string out = a.str("-o", "--output", "");
  KvCalibrationParams p;
  const long long window = a.num("--window", "", 1024), windows = a.num("--windows", "", 24), skip = a.num("--skip", "", 0);
  p.n_threads = static_cast<int>(a.num("-t", "--threads", 2));
  a.finish();
  if (model_path.empty() || text_path.empty() || out.empty()) throw std::invalid_argument("-m, -f and -o are required");
  if (window < 32 || window > (1 << 20) || windows < 1 || windows > 100000 || skip < 0)
    throw std::invalid_argument("--window in [32, 2^20], --windows >= 1, --skip >= 0");
  p.window = static_cast<uint32_t>(window);
  p.max_windows = static_cast<uint32_t>(windows);
  auto model = Model::load(model_path);
  std::vector<Token> tokens = model->tokenizer().encode(read_text_file(text_path), false, false);
  if (static_cast<size_t>(skip) >= tokens.size()) throw std::invalid_argument("--skip is past the text's " + std::to_string(tokens.size()) + " tokens");
  tokens.erase(tokens.begin(), tokens.begin() + skip);
  const auto code = calibrate_kv_code(*model, tokens, p);
  save_kv_code(*code, out);
  std::printf("wrote %s: %s\n", out.c_str(), describe_kv_code(*code).c_str());
  return 0;
}

Registrar reg("kv-calibrate", [](const std::vector<std::string>& args) {
  try {
    return cmd_kv_calibrate(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentkv kv-calibrate: %s\n", e.what());
    return 1;
  }
});

}  // namespace
}  // namespace agentkv::tools
