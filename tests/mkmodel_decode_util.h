// What the mkmodel type tests (iq_mkmodel_test, mxfp4_mkmodel_test) share: a small vocabulary of
// plain tokens (decoding takes token ids, so no tokenizer file is needed), a model written to a
// temporary file, the logits of a short prompt, and the cosine similarity of two logit vectors.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "agentkv/batch.h"
#include "agentkv/context.h"
#include "agentkv/model.h"
#include "gguf/gguf.h"
#include "model/presets.h"

namespace agentkv::mkmodel::test {

inline VocabData small_vocab(int n) {
  VocabData v;
  for (int i = 0; i < n; ++i) {
    v.tokens.push_back("tok" + std::to_string(i));
    v.types.push_back(TokenType::Normal);
  }
  v.merges = {"t o", "to k"};
  v.bos = 0;
  v.eos = 1;
  return v;
}

// Writes `shape` in file type `type` (seed 9, 500 plain tokens) to a temporary file; returns its path.
inline std::string write_model(const ModelShape& shape, FileType type, const std::string& tag) {
  gguf::Writer w;
  BuildOptions o;
  o.type = type;
  o.seed = 9;
  o.n_threads = 2;
  build_model(w, shape, small_vocab(500), o);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("agentkv-" + tag + "-" + std::string(file_type_name(type)) + "-" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  w.write(path);
  return path;
}

// The logits after the prompt (one decode of the whole prompt).
inline std::vector<float> logits_of(const std::string& path, const std::vector<Token>& prompt, int n_threads = 2) {
  const auto model = Model::load(path);
  ContextParams params;
  params.n_ctx = 64;
  params.n_threads = n_threads;
  Context ctx(*model, params);
  Batch b;
  b.add_sequence(prompt.data(), prompt.size(), 0, 0, true);
  EXPECT_EQ(ctx.decode(b), 0);
  return std::vector<float>(ctx.last_logits(), ctx.last_logits() + model->n_vocab());
}

// Cosine similarity of two logit vectors; every logit of `got` must be finite.
inline double logits_cosine(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double dot = 0, gg = 0, ww = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i])) << "logit " << i;
    dot += static_cast<double>(got[i]) * want[i];
    gg += static_cast<double>(got[i]) * got[i];
    ww += static_cast<double>(want[i]) * want[i];
  }
  return dot / std::sqrt(gg * ww);
}

}  // namespace agentkv::mkmodel::test
