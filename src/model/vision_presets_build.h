// Builds a vision projector GGUF of a named shape (agentkv/vision_presets.h) into a writer.
#pragma once
#include <cstdint>

#include "agentkv/vision_presets.h"

namespace agentkv::gguf { class Writer; }

namespace agentkv::mkmodel {

// Adds the metadata and every tensor (random values from `seed`) to `w`, which must be empty.
BuildStats build_vision_projector(gguf::Writer& w, const VisionShape& shape, uint64_t seed, int n_threads);

}  // namespace agentkv::mkmodel
