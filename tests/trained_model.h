// The committed trained model (trained/agentkv-tiny: 4 layers, 2 KV heads of 64, a copying circuit
// in layer 1's head 0; docs/trained-model.md) and its held-out text as tokens, loaded once per test
// binary: the model the tests use where a random-weight fixture retrieves nothing.
#pragma once
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"

namespace agentkv::testing_support {

struct TrainedModel {
  std::unique_ptr<Model> model;
  std::vector<Token> tokens;  // trained/agentkv-tiny/heldout.txt, no special tokens
};

inline const TrainedModel& trained_model() {
  static const TrainedModel t = [] {
    const std::string dir = std::string(AGENTKV_SOURCE_DIR) + "/trained/agentkv-tiny";
    TrainedModel m;
    m.model = Model::load(dir + "/model.gguf");
    std::ifstream f(dir + "/heldout.txt");
    std::stringstream text;
    text << f.rdbuf();
    m.tokens = m.model->tokenizer().encode(text.str(), false, false);
    return m;
  }();
  return t;
}

}  // namespace agentkv::testing_support
