// LayerNorm of one row as ggml-cpu computes it (the vision tower's norms): the mean from a sum in
// double rounded to float; the variance from (x - mean)^2 summed per vector of the llama.cpp build
// the active level reproduces (16 floats at AVX-512, 8 otherwise, each vector reduced in float in
// its tree order) into a double, the tail element by element; then y = (x - mean) / sqrt(var + eps),
// times w, plus b (ggml's separate MUL and ADD ops). w and b may be null. In-place allowed.
#pragma once
#include <cstdint>

namespace agentkv {

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n, float eps);

}  // namespace agentkv
