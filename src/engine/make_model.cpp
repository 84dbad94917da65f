#include "agentkv/make_model.h"

#include "gguf/gguf.h"
#include "model/presets.h"

namespace agentkv {

mkmodel::BuildStats write_model_file(const std::string& path, const mkmodel::ModelShape& shape, const VocabData& vocab,
                                     const mkmodel::BuildOptions& options) {
  gguf::Writer writer;
  const mkmodel::BuildStats stats = mkmodel::build_model(writer, shape, vocab, options);
  writer.write(path);
  return stats;
}

}  // namespace agentkv
