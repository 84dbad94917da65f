// llama.cpp's own matmul of a quantized weight as it runs for a model on the CPU: the weight placed
// in the CPU backend's CPU_REPACK buffer (setting its data repacks it, e.g. mxfp4 into mxfp4_8x8),
// ggml_mul_mat of f32 activation rows computed by the CPU backend on one thread. For
// mxfp4_reference.c and mxfp4_bench.c; not part of agentkv's build.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

struct repacked_weight {
  struct ggml_context* ctx;
  ggml_backend_buffer_t buffer;
  struct ggml_tensor* w;  // n_in x n_out
  ggml_backend_t backend;
};

// y = W x for n_tokens rows: the graph and its f32 tensors.
struct mul_mat_graph {
  struct ggml_context* ctx;
  ggml_backend_buffer_t buffer;
  struct ggml_tensor *x, *y;
  struct ggml_cgraph* graph;
};

static inline ggml_backend_buffer_type_t repack_buffer_type(void) {
  ggml_backend_reg_t reg = ggml_backend_cpu_reg();
  ggml_backend_dev_get_extra_bufts_t get =
      (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
  for (ggml_backend_buffer_type_t* b = get ? get(ggml_backend_reg_dev_get(reg, 0)) : NULL; b && *b; ++b)
    if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
  fprintf(stderr, "no CPU_REPACK buffer type in this build\n");
  exit(1);
}

static inline struct repacked_weight repacked_weight_new(enum ggml_type type, int64_t n_in, int64_t n_out, const void* data) {
  struct repacked_weight rw;
  struct ggml_init_params params = {ggml_tensor_overhead() * 2, NULL, true};
  rw.ctx = ggml_init(params);
  rw.w = ggml_new_tensor_2d(rw.ctx, type, n_in, n_out);
  rw.buffer = ggml_backend_alloc_ctx_tensors_from_buft(rw.ctx, repack_buffer_type());
  ggml_backend_tensor_set(rw.w, data, 0, ggml_nbytes(rw.w));
  rw.backend = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(rw.backend, 1);
  return rw;
}

static inline void repacked_weight_free(struct repacked_weight* rw) {
  ggml_backend_free(rw->backend);
  ggml_backend_buffer_free(rw->buffer);
  ggml_free(rw->ctx);
}

static inline struct mul_mat_graph mul_mat_graph_new(const struct repacked_weight* rw, int64_t n_tokens, const float* x) {
  struct mul_mat_graph g;
  struct ggml_init_params params = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true};
  g.ctx = ggml_init(params);
  g.x = ggml_new_tensor_2d(g.ctx, GGML_TYPE_F32, rw->w->ne[0], n_tokens);
  g.y = ggml_mul_mat(g.ctx, rw->w, g.x);
  g.graph = ggml_new_graph(g.ctx);
  ggml_build_forward_expand(g.graph, g.y);
  g.buffer = ggml_backend_alloc_ctx_tensors(g.ctx, rw->backend);
  ggml_backend_tensor_set(g.x, x, 0, ggml_nbytes(g.x));
  return g;
}

static inline void mul_mat_graph_compute(const struct repacked_weight* rw, struct mul_mat_graph* g) {
  if (ggml_backend_graph_compute(rw->backend, g->graph) != GGML_STATUS_SUCCESS) {
    fprintf(stderr, "graph compute failed\n");
    exit(1);
  }
}

static inline void mul_mat_graph_free(struct mul_mat_graph* g) {
  ggml_backend_buffer_free(g->buffer);
  ggml_free(g->ctx);
}
