// Times llama.cpp's own matmul of an mxfp4 matrix: ggml_mul_mat on the CPU backend (one thread),
// the weights in its CPU_REPACK buffer as llama.cpp loads them, for 1 to 256 f32 activation rows;
// ms per call, best of 5 runs in thread CPU time. Mxfp4.DISABLED_ThroughputReport
// (tests/mxfp4_quant_test.cpp) times agentkv's matmul on the same shapes. Not part of agentkv's
// build (tests/reference/README.md).
//
//   mxfp4_bench N_IN N_OUT
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "reference_common.h"

static ggml_backend_buffer_type_t repack_buffer_type(void) {
  ggml_backend_reg_t reg = ggml_backend_cpu_reg();
  ggml_backend_dev_get_extra_bufts_t get =
      (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
  for (ggml_backend_buffer_type_t* b = get ? get(ggml_backend_reg_dev_get(reg, 0)) : NULL; b && *b; ++b)
    if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
  fprintf(stderr, "no CPU_REPACK buffer type in this build\n");
  exit(1);
}

static double thread_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s N_IN N_OUT\n", argv[0]);
    return 2;
  }
  const int64_t n_in = atoll(argv[1]), n_out = atoll(argv[2]);
  ggml_cpu_init();
  struct ggml_init_params wp = {ggml_tensor_overhead() * 2, NULL, true};
  struct ggml_context* wctx = ggml_init(wp);
  struct ggml_tensor* W = ggml_new_tensor_2d(wctx, GGML_TYPE_MXFP4, n_in, n_out);
  ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, repack_buffer_type());
  float* wf = malloc(sizeof(float) * n_in * n_out);
  for (int64_t i = 0; i < n_in * n_out; ++i) wf[i] = heavy_tailed();
  void* wq = malloc(ggml_nbytes(W));
  ggml_quantize_chunk(GGML_TYPE_MXFP4, wf, wq, 0, n_out, n_in, NULL);
  ggml_backend_tensor_set(W, wq, 0, ggml_nbytes(W));
  ggml_backend_t backend = ggml_backend_cpu_init();
  ggml_backend_cpu_set_n_threads(backend, 1);
  const int64_t tokens[] = {1, 2, 4, 8, 16, 64, 256};
  for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; ++i) {
    const int64_t n = tokens[i];
    struct ggml_init_params cp = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true};
    struct ggml_context* ctx = ggml_init(cp);
    struct ggml_tensor* X = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_in, n);
    struct ggml_tensor* Y = ggml_mul_mat(ctx, W, X);
    struct ggml_cgraph* graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, Y);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    float* x = malloc(sizeof(float) * n_in * n);
    for (int64_t k = 0; k < n_in * n; ++k) x[k] = heavy_tailed();
    ggml_backend_tensor_set(X, x, 0, ggml_nbytes(X));
    const int reps = n >= 64 ? 2 : 20;
    double best = 1e30;
    for (int run = 0; run < 5; ++run) {
      const double t0 = thread_seconds();
      for (int k = 0; k < reps; ++k) ggml_backend_graph_compute(backend, graph);
      const double s = (thread_seconds() - t0) / reps;
      if (s < best) best = s;
    }
    printf("llama.cpp mxfp4 [%lld x %lld] x %lld tokens: %.3f ms (%.1f GMAC/s)\n", (long long)n_in, (long long)n_out,
           (long long)n, best * 1e3, 1e-9 * (double)(n_in * n_out * n) / best);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    free(x);
  }
  ggml_backend_free(backend);
  ggml_backend_buffer_free(wbuf);
  ggml_free(wctx);
  free(wf);
  free(wq);
  return 0;
}
