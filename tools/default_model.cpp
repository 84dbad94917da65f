#include "tools/default_model.h"

#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "tools/commands.h"

namespace agentkv::tools {

std::string resolve_model_path(const std::string& path) {
  if (!path.empty()) return path;
  const std::string def = "models/default.gguf";
  if (std::filesystem::exists(def)) return def;
  std::filesystem::create_directories("models");
  std::fprintf(stderr, "agentkv: no -m given and %s is missing: generating the built-in default model "
                       "(random weights, qwen3-tiny shape, q8_0)\n", def.c_str());
  for (const auto& c : commands())
    if (c.name == "mkmodel") {
      if (c.fn({"--preset", "qwen3-tiny", "--type", "q8_0", "--seed", "1", "-o", def}) != 0)
        throw std::runtime_error("could not generate the default model");
      return def;
    }
  throw std::runtime_error("mkmodel is not available");
}

}  // namespace agentkv::tools
