// Writes ggml's reference vectors for the mxfp4 weight type (tests/data/quant/mxfp4.*, checked by
// tests/mxfp4_quant_test.cpp), and adds an "mxfp4" entry to OUT_DIR/index.json (run it after
// iq_quant_reference, which writes that file anew):
//   mxfp4.quant.bin, mxfp4.dequant_f32.bin  ggml's quantization of the input rows, its dequantization
//   q8_0.act.bin                            the input rows through ggml-cpu's q8_0 from_float
//   mxfp4.dot_f32.bin                       ggml-cpu's vec_dot of every quantized row with every
//                                           activation row: [w * n_rows + a]
//   mxfp4.dot_odd_f32.bin                   the same over the first 32, 96 and 480 elements (an odd
//                                           block count: the kernel's last block goes alone)
//   mxfp4.random.quant.bin (16 rows), .random.dequant_f32.bin, .random.dot_f32.bin against
//   q8_0.random_act.bin (heavy-tailed rows, floats in mxfp4.random_act_f32.bin): random codes, the
//                                           exponent in 127 +- 8
//   mxfp4.edge.quant.bin, .edge.dequant_f32.bin: 256 blocks, exponent 0..255 (the subnormal and
//                                           largest scales), random codes
//   mxfp4.edge_input_f32.bin, .edge_input.quant.bin: blocks made to hit the quantizer's corners
//                                           (ties between levels, zeros, tiny and huge magnitudes,
//                                           powers of two and their neighbours) and ggml's bytes
//   mxfp4.matmul_*: a 24 x 480 mxfp4 matrix (its own random codes) placed in the CPU backend's
//                                           CPU_REPACK buffer (as llama.cpp loads weights), times 1,
//                                           3 and 9 heavy-tailed f32 activation rows through
//                                           ggml_mul_mat: the outputs of the repacked GEMV / GEMM
//                                           kernels, [n = 1][n = 3][n = 9] each token-major
// Links llama.cpp's libggml-base and libggml-cpu; not part of agentkv's build (the build and run
// commands: tests/reference/README.md).
//
//   mxfp4_reference INPUT_F32 N_ROWS N_PER_ROW OUT_DIR
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "reference_common.h"
#include "repacked_matmul.h"

static void* checked_malloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

// Random mxfp4 rows: every code byte random, each block's exponent e_lo + (0 .. e_span - 1).
static uint8_t* random_blocks(int64_t n_blocks, int e_lo, int e_span) {
  uint8_t* q = checked_malloc((size_t)n_blocks * 17);
  for (int64_t i = 0; i < n_blocks * 17; ++i) q[i] = (uint8_t)next_random();
  for (int64_t b = 0; b < n_blocks; ++b) q[b * 17] = (uint8_t)(e_lo + (int)(next_random() % (uint64_t)e_span));
  return q;
}

static void dequantize_rows(const uint8_t* q, int64_t n_rows, int64_t n_per_row, float* out) {
  const size_t row_size = ggml_row_size(GGML_TYPE_MXFP4, n_per_row);
  for (int64_t r = 0; r < n_rows; ++r)
    ggml_get_type_traits(GGML_TYPE_MXFP4)->to_float(q + r * row_size, out + r * n_per_row, n_per_row);
}

static void quantize_act(const float* x, int64_t n_rows, int64_t n_per_row, uint8_t* out) {
  const size_t act_row = ggml_row_size(GGML_TYPE_Q8_0, n_per_row);
  for (int64_t r = 0; r < n_rows; ++r)
    ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float(x + r * n_per_row, out + r * act_row, n_per_row);
}

// dots[w * n_act + a] over the first n elements of each row.
static void dots(const uint8_t* q, size_t row_size, int64_t n_w, const uint8_t* act, size_t act_row, int64_t n_act,
                 int64_t n, float* out) {
  const struct ggml_type_traits_cpu* cpu = ggml_get_type_traits_cpu(GGML_TYPE_MXFP4);
  for (int64_t w = 0; w < n_w; ++w)
    for (int64_t a = 0; a < n_act; ++a) cpu->vec_dot((int)n, &out[w * n_act + a], 0, q + w * row_size, 0, act + a * act_row, 0, 1);
}

// Blocks for the quantizer's corners (32 floats each).
static int64_t edge_inputs(float* x) {
  int64_t nb = 0;
  float* b;
  // Ties: amax 8 gives the half scale 1, so these sit exactly between two levels (and the signs).
  b = x + 32 * nb++;
  {
    const float ties[] = {8, 0.5f, 1.5f, 2.5f, 3.5f, 5, 7, 10, -0.5f, -1.5f, -2.5f, -3.5f, -5, -7, -10, 0,
                          -0.f, 0.25f, -0.25f, 0.75f, 1.25f, 4.5f, 6.5f, 9, 11, -9, -11, 12, -12, 6, -6, 3};
    memcpy(b, ties, sizeof ties);
  }
  // All zeros; and the same with one negative zero.
  b = x + 32 * nb++;
  for (int j = 0; j < 32; ++j) b[j] = 0.f;
  b = x + 32 * nb++;
  for (int j = 0; j < 32; ++j) b[j] = j == 5 ? -0.f : 0.f;
  // Powers of two as amax, and the float just below and above each (log2f's rounding decides).
  const float amaxes[] = {1, 4, 0.125f, 1024, 3.0517578125e-05f};
  for (size_t i = 0; i < sizeof amaxes / sizeof amaxes[0]; ++i) {
    for (int dir = -1; dir <= 1; ++dir) {
      b = x + 32 * nb++;
      const float amax = dir == 0 ? amaxes[i] : nextafterf(amaxes[i], dir < 0 ? 0.f : INFINITY);
      for (int j = 0; j < 32; ++j) b[j] = amax * (float)((int)(next_random() % 2001) - 1000) / 1000.f;
      b[next_random() % 32] = (next_random() & 1) ? amax : -amax;
    }
  }
  // Large and tiny magnitudes: 3e38 (its random factors, scaled by 1000 on the way, overflow to
  // inf: the exponent conversion then wraps to 0), 1e30, and amax at and below 2^-125 (a subnormal
  // scale, or an exponent below 0 that ggml's float-to-uint8_t conversion wraps).
  const float scales[] = {3.0e38f, 1.0e30f, 2.3509887e-38f, 1.0e-38f, 1.0e-39f, 1.4e-45f};
  for (size_t i = 0; i < sizeof scales / sizeof scales[0]; ++i) {
    b = x + 32 * nb++;
    for (int j = 0; j < 32; ++j) b[j] = scales[i] * (float)((int)(next_random() % 2001) - 1000) / 1000.f;
    b[7] = -scales[i];
  }
  // Plain random blocks of several magnitudes.
  for (int i = 0; i < 8; ++i) {
    b = x + 32 * nb++;
    for (int j = 0; j < 32; ++j) b[j] = heavy_tailed() * ldexpf(1.f, i * 3 - 12);
  }
  return nb;
}

// y = W x through llama.cpp's repacked kernels (repacked_matmul.h).
static void repacked_mul_mat(const uint8_t* w, int64_t n_in, int64_t n_out, const float* x, int64_t n_tokens, float* y) {
  struct repacked_weight rw = repacked_weight_new(GGML_TYPE_MXFP4, n_in, n_out, w);
  struct mul_mat_graph g = mul_mat_graph_new(&rw, n_tokens, x);
  mul_mat_graph_compute(&rw, &g);
  ggml_backend_tensor_get(g.y, y, 0, ggml_nbytes(g.y));
  mul_mat_graph_free(&g);
  repacked_weight_free(&rw);
}

// Adds (or replaces) the "mxfp4" entry at the end of OUT_DIR/index.json.
static void add_index_entry(const char* dir, const char* entry) {
  char path[1024];
  snprintf(path, sizeof path, "%s/index.json", dir);
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot read %s (run iq_quant_reference first)\n", path);
    exit(1);
  }
  static char text[1 << 16];
  const size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  char* cut = strstr(text, ",\"mxfp4\":");
  if (!cut) cut = strrchr(text, '}');
  if (!cut) {
    fprintf(stderr, "%s is not a JSON object\n", path);
    exit(1);
  }
  *cut = 0;
  f = fopen(path, "wb");
  if (!f || fprintf(f, "%s,\"mxfp4\":%s}\n", text, entry) < 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

int main(int argc, char** argv) {
  int64_t n_rows, n_per_row;
  const char* out_dir;
  float* input = read_input(argc, argv, &n_rows, &n_per_row, &out_dir);
  if (n_per_row < 480 || n_per_row % 32 != 0) {
    fprintf(stderr, "N_PER_ROW must be a multiple of 32, at least 480\n");
    return 2;
  }
  ggml_cpu_init();
  rng_state = 0x2545F4914F6CDD1Dull;  // this program's own sequence
  const enum ggml_type type = GGML_TYPE_MXFP4;
  if (ggml_get_type_traits_cpu(type)->vec_dot_type != GGML_TYPE_Q8_0) {
    fprintf(stderr, "mxfp4's vec_dot_type is not q8_0\n");
    return 1;
  }
  const size_t row_size = ggml_row_size(type, n_per_row);
  const size_t act_row = ggml_row_size(GGML_TYPE_Q8_0, n_per_row);

  // ggml's quantization of the input rows, its dequantization, the activations, every dot.
  uint8_t* q = checked_malloc(row_size * n_rows);
  ggml_quantize_chunk(type, input, q, 0, n_rows, n_per_row, NULL);
  write_file(out_dir, "mxfp4", ".quant.bin", q, row_size * n_rows);
  float* deq = checked_malloc(sizeof(float) * n_rows * n_per_row);
  dequantize_rows(q, n_rows, n_per_row, deq);
  write_file(out_dir, "mxfp4", ".dequant_f32.bin", deq, sizeof(float) * n_rows * n_per_row);
  uint8_t* act = checked_malloc(act_row * n_rows);
  quantize_act(input, n_rows, n_per_row, act);
  write_file(out_dir, "q8_0", ".act.bin", act, act_row * n_rows);
  float* d = checked_malloc(sizeof(float) * n_rows * n_rows * 3);
  dots(q, row_size, n_rows, act, act_row, n_rows, n_per_row, d);
  write_file(out_dir, "mxfp4", ".dot_f32.bin", d, sizeof(float) * n_rows * n_rows);
  const int64_t odd_lengths[3] = {32, 96, 480};
  for (int i = 0; i < 3; ++i) dots(q, row_size, n_rows, act, act_row, n_rows, odd_lengths[i], d + i * n_rows * n_rows);
  write_file(out_dir, "mxfp4", ".dot_odd_f32.bin", d, sizeof(float) * n_rows * n_rows * 3);

  // Random codes against heavy-tailed activations.
  const int64_t n_random_rows = 16;
  uint8_t* rq = random_blocks(n_random_rows * n_per_row / 32, 119, 17);
  write_file(out_dir, "mxfp4", ".random.quant.bin", rq, row_size * n_random_rows);
  float* rdeq = checked_malloc(sizeof(float) * n_random_rows * n_per_row);
  dequantize_rows(rq, n_random_rows, n_per_row, rdeq);
  write_file(out_dir, "mxfp4", ".random.dequant_f32.bin", rdeq, sizeof(float) * n_random_rows * n_per_row);
  float* rx = checked_malloc(sizeof(float) * n_rows * n_per_row);
  for (int64_t i = 0; i < n_rows * n_per_row; ++i) rx[i] = heavy_tailed();
  write_file(out_dir, "mxfp4", ".random_act_f32.bin", rx, sizeof(float) * n_rows * n_per_row);
  uint8_t* ract = checked_malloc(act_row * n_rows);
  quantize_act(rx, n_rows, n_per_row, ract);
  write_file(out_dir, "q8_0", ".random_act.bin", ract, act_row * n_rows);
  float* rdots = checked_malloc(sizeof(float) * n_random_rows * n_rows);
  dots(rq, row_size, n_random_rows, ract, act_row, n_rows, n_per_row, rdots);
  write_file(out_dir, "mxfp4", ".random.dot_f32.bin", rdots, sizeof(float) * n_random_rows * n_rows);

  // Every exponent.
  uint8_t* eq = random_blocks(256, 0, 1);
  for (int e = 0; e < 256; ++e) eq[e * 17] = (uint8_t)e;
  write_file(out_dir, "mxfp4", ".edge.quant.bin", eq, 256 * 17);
  float* edeq = checked_malloc(sizeof(float) * 256 * 32);
  dequantize_rows(eq, 1, 256 * 32, edeq);
  write_file(out_dir, "mxfp4", ".edge.dequant_f32.bin", edeq, sizeof(float) * 256 * 32);

  // The quantizer's corners.
  float ex[64 * 32];
  const int64_t n_edge = edge_inputs(ex);
  uint8_t* exq = checked_malloc((size_t)n_edge * 17);
  ggml_quantize_chunk(type, ex, exq, 0, 1, n_edge * 32, NULL);
  write_file(out_dir, "mxfp4", ".edge_input_f32.bin", ex, sizeof(float) * n_edge * 32);
  write_file(out_dir, "mxfp4", ".edge_input.quant.bin", exq, (size_t)n_edge * 17);

  // The repacked matmul: 24 rows of 480, against 1, 3 and 9 tokens.
  const int64_t mm_in = 480, mm_out = 24, mm_tokens[3] = {1, 3, 9};
  uint8_t* mw = random_blocks(mm_out * mm_in / 32, 119, 17);
  float* mx = checked_malloc(sizeof(float) * 9 * mm_in);
  for (int64_t i = 0; i < 9 * mm_in; ++i) mx[i] = heavy_tailed();
  float* my = checked_malloc(sizeof(float) * (1 + 3 + 9) * mm_out);
  int64_t at = 0, differ = 0;
  for (int i = 0; i < 3; ++i) {
    repacked_mul_mat(mw, mm_in, mm_out, mx, mm_tokens[i], my + at);
    at += mm_tokens[i] * mm_out;
  }
  // How many outputs the repacked kernels round differently from vec_dot (a check that they ran).
  {
    const size_t mm_act_row = ggml_row_size(GGML_TYPE_Q8_0, mm_in);
    uint8_t* mact = checked_malloc(mm_act_row * 9);
    quantize_act(mx, 9, mm_in, mact);
    float* vd = checked_malloc(sizeof(float) * mm_out * 9);
    dots(mw, ggml_row_size(type, mm_in), mm_out, mact, mm_act_row, 9, mm_in, vd);
    for (int64_t t = 0; t < 9; ++t)
      for (int64_t r = 0; r < mm_out; ++r) differ += memcmp(&vd[r * 9 + t], &my[(1 + 3) * mm_out + t * mm_out + r], 4) != 0;
    free(mact);
    free(vd);
  }
  fprintf(stderr, "repacked mul_mat: %lld of %lld outputs (9 tokens) differ from vec_dot in the last bits\n",
          (long long)differ, (long long)(9 * mm_out));
  write_file(out_dir, "mxfp4", ".matmul_w.quant.bin", mw, (size_t)(mm_out * mm_in / 32) * 17);
  write_file(out_dir, "mxfp4", ".matmul_act_f32.bin", mx, sizeof(float) * 9 * mm_in);
  write_file(out_dir, "mxfp4", ".matmul_out_f32.bin", my, sizeof(float) * (1 + 3 + 9) * mm_out);

  char entry[2048];
  snprintf(entry, sizeof entry,
           "{\"ggml_type_id\":%d,\"block_size\":%lld,\"type_size\":%zu,\"row_size\":%zu,\"vec_dot_type\":\"%s\","
           "\"odd_lengths\":[32,96,480],\"random_rows\":%lld,\"edge_blocks\":256,\"edge_input_blocks\":%lld,"
           "\"matmul\":{\"n_in\":%lld,\"n_out\":%lld,\"tokens\":[1,3,9],\"buffer\":\"CPU_REPACK\"}}",
           (int)type, (long long)ggml_blck_size(type), ggml_type_size(type), row_size, ggml_type_name(GGML_TYPE_Q8_0),
           (long long)n_random_rows, (long long)n_edge, (long long)mm_in, (long long)mm_out);
  add_index_entry(out_dir, entry);
  return 0;
}
