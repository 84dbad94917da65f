// The fixture models (../shared/fixtures/models/NAME.gguf), each loaded once per test binary; a test
// that uses them starts with AGENTKV_NEEDS_FIXTURES() (fixtures.h).
#pragma once
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "fixtures.h"
#include "model/model.h"
#include "model/presets.h"
#include "agentkv/make_model.h"

namespace agentkv::testing_support {

inline const Model& fixture_model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> cache;
  auto& m = cache[name];
  if (!m) m = Model::load(std::string(AGENTKV_FIXTURES_DIR) + "/models/" + name + ".gguf");
  return *m;
}

// The vocabulary `agentkv mkmodel` gives a preset from this source tree: the fixture tokenizer.
inline VocabData fixture_vocab() {
  const std::string tok = std::string(AGENTKV_FIXTURES_DIR) + "/tokenizer/qwen3-tokenizer.json";
  return mkmodel::load_vocab(tok, mkmodel::sibling_tokenizer_config(tok));
}

// A preset model exactly as `agentkv mkmodel --preset NAME` writes it (seed 42, the fixture
// tokenizer), written to a temporary file that is removed once mapped.
inline std::unique_ptr<Model> preset_model(const std::string& preset, const std::string& tag = "test") {
  mkmodel::BuildOptions options;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("agentkv-" + tag + "-" + preset + "-" + std::to_string(::getpid()) + ".gguf")).string();
  write_model_file(path, mkmodel::find_preset(preset), fixture_vocab(), options);
  auto model = Model::load(path);
  std::filesystem::remove(path);  // the mapping keeps the data
  return model;
}

}  // namespace agentkv::testing_support
