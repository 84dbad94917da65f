// Which rounding the kernels follow, for the whole process.
//
// By default each kernel reproduces llama.cpp's CPU numerics, and llama.cpp picks its algorithm
// by batch size: attention over a batch of >= 64 query rows is tiled (F32 accumulators, one max
// per 64 keys), over fewer rows it runs key by key (F16 accumulator), a single row over >= 512 keys
// is split across threads; an F16 matmul of one token is a vec_dot, of more tokens tinyBLAS; q4_K
// rows come in groups of 4. So a token's logits depend (in the last bits) on how many other
// tokens shared its batch: a prompt continued from a cache differs slightly from the same prompt
// evaluated in one go, and a near tie can flip a greedy token.
//
// Batch-invariant numerics (SGLang's deterministic inference, vLLM's batch-invariant mode) give
// every row the same algorithm whatever the batch: tiled attention for F16 / F32 caches at any
// batch size and never split (other cache types: key by key, never split), tinyBLAS order for
// F16 / F32 matmuls of any token count, q4_K rows one by one, the gated delta rule token by
// token (its chunked form rounds by where the chunks fall in the batch). Then cached and uncached runs, runs
// under load and quiet runs give bit-identical outputs. It stays as close to llama.cpp as llama.cpp
// is to itself on the fidelity fixtures' means, not always on their maxima, and decoding over long
// contexts uses fewer threads per row (docs/memory-semantics.md, "Batch invariance").
#pragma once

namespace agentkv {

// Process-wide; not thread-safe with kernels running (set it at start-up or between tests).
void set_batch_invariant(bool on);
bool batch_invariant();

}  // namespace agentkv
