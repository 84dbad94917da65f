#include "agentkv/make_model.h"

#include "gguf/gguf.h"
#include "model/presets.h"
#include "model/vision_presets_build.h"

namespace agentkv {

mkmodel::BuildStats write_model_file(const std::string& path, const mkmodel::ModelShape& shape, const VocabData& vocab,
                                     const mkmodel::BuildOptions& options) {
  gguf::Writer writer;
  const mkmodel::BuildStats stats = mkmodel::build_model(writer, shape, vocab, options);
  writer.write(path);
  return stats;
}

mkmodel::BuildStats write_vision_file(const std::string& path, const mkmodel::VisionShape& shape, uint64_t seed,
                                      int n_threads) {
  gguf::Writer writer;
  const mkmodel::BuildStats stats = mkmodel::build_vision_projector(writer, shape, seed, n_threads);
  writer.write(path);
  return stats;
}

}  // namespace agentkv
