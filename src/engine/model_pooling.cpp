// The model's own pooling type, apart from pooling.cpp: the request fuzzer compiles that file
// alone, without the model layer.
#include "agentkv/pooling.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace agentkv {

std::optional<uint64_t> model_pooling_type(const Model& model) {
  return ArchModel::of(model).gguf().metadata().get_uint(model.config().arch_key + ".pooling_type");
}

}  // namespace agentkv
