// The built-in default model: nothing can be downloaded, so `agentkv run` / `serve` without -m
// use models/default.gguf and generate it with mkmodel (preset qwen3-tiny, q8_0) if it is absent.
#pragma once
#include <string>

namespace agentkv::tools {
// Returns `path` when non-empty; else the default model's path, generating the file first.
std::string resolve_model_path(const std::string& path);
}
