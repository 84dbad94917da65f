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

#include "ggml-cpu.h"
#include "ggml.h"
#include "reference_common.h"
#include "repacked_matmul.h"

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
  float* wf = malloc(sizeof(float) * n_in * n_out);
  for (int64_t i = 0; i < n_in * n_out; ++i) wf[i] = heavy_tailed();
  void* wq = malloc(ggml_row_size(GGML_TYPE_MXFP4, n_in) * n_out);
  ggml_quantize_chunk(GGML_TYPE_MXFP4, wf, wq, 0, n_out, n_in, NULL);
  struct repacked_weight rw = repacked_weight_new(GGML_TYPE_MXFP4, n_in, n_out, wq);
  const int64_t tokens[] = {1, 2, 4, 8, 16, 64, 256};
  for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; ++i) {
    const int64_t n = tokens[i];
    float* x = malloc(sizeof(float) * n_in * n);
    for (int64_t k = 0; k < n_in * n; ++k) x[k] = heavy_tailed();
    struct mul_mat_graph g = mul_mat_graph_new(&rw, n, x);
    const int reps = n >= 64 ? 2 : 20;
    double best = 1e30;
    for (int run = 0; run < 5; ++run) {
      const double t0 = thread_seconds();
      for (int k = 0; k < reps; ++k) mul_mat_graph_compute(&rw, &g);
      const double s = (thread_seconds() - t0) / reps;
      if (s < best) best = s;
    }
    printf("llama.cpp mxfp4 [%lld x %lld] x %lld tokens: %.3f ms (%.1f GMAC/s)\n", (long long)n_in, (long long)n_out,
           (long long)n, best * 1e3, 1e-9 * (double)(n_in * n_out * n) / best);
    mul_mat_graph_free(&g);
    free(x);
  }
  repacked_weight_free(&rw);
  free(wf);
  free(wq);
  return 0;
}
