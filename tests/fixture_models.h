// The fixture models (../shared/fixtures/models/NAME.gguf), each loaded once per test binary; a test
// that uses them starts with AGENTKV_NEEDS_FIXTURES() (fixtures.h).
#pragma once
#include <map>
#include <memory>
#include <string>

#include "fixtures.h"
#include "model/model.h"
#include "model/presets.h"

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

}  // namespace agentkv::testing_support
