// Writes ggml's reference vectors for the i-quant weight types (tests/data/quant/, checked by
// tests/iq_quant_test.cpp): for each type, ggml's quantization of the input rows (an all-ones
// importance matrix where the quantizer requires one), ggml's dequantization of those bytes, and
// ggml-cpu's dot product of every quantized row with every input row converted to the type's
// vec_dot_type by ggml-cpu's from_float. Then, because a quantizer only emits some of the codes a
// block can hold, the same for random blocks (every byte pattern is a valid block; d is set to a
// moderate value) against heavy-tailed activation rows: TYPE.random.quant.bin, its dequantization
// TYPE.random.dequant_f32.bin and TYPE.random.dot_f32.bin, the activations in q8_K.random_act.bin (their floats:
// random_act_f32.bin). Links llama.cpp's libggml-base and libggml-cpu; not part
// of agentkv's build (the build and run commands: tests/reference/README.md).
//
//   iq_quant_reference INPUT_F32 N_ROWS N_PER_ROW OUT_DIR
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "reference_common.h"

int main(int argc, char** argv) {
  int64_t n_rows, n_per_row;
  const char* out_dir;
  float* input = read_input(argc, argv, &n_rows, &n_per_row, &out_dir);
  write_file(out_dir, "input_f32", ".bin", input, sizeof(float) * n_rows * n_per_row);
  ggml_cpu_init();

  const enum ggml_type types[] = {GGML_TYPE_IQ4_XS, GGML_TYPE_IQ3_S,  GGML_TYPE_IQ3_XXS,
                                  GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S};
  float* ones = malloc(sizeof(float) * n_per_row);
  for (int64_t i = 0; i < n_per_row; ++i) ones[i] = 1.0f;

  // Heavy-tailed activation rows in q8_K for the random blocks (every type's vec_dot_type).
  float* random_x = malloc(sizeof(float) * n_rows * n_per_row);
  for (int64_t i = 0; i < n_rows * n_per_row; ++i) random_x[i] = heavy_tailed();
  const size_t act_row = ggml_row_size(GGML_TYPE_Q8_K, n_per_row);
  uint8_t* random_act = malloc(act_row * n_rows);
  for (int64_t r = 0; r < n_rows; ++r)
    ggml_get_type_traits_cpu(GGML_TYPE_Q8_K)->from_float(random_x + r * n_per_row, random_act + r * act_row, n_per_row);
  write_file(out_dir, "random_act_f32", ".bin", random_x, sizeof(float) * n_rows * n_per_row);
  write_file(out_dir, "q8_K", ".random_act.bin", random_act, act_row * n_rows);

  char index[8192];
  int len = snprintf(index, sizeof index, "{\"n_rows\":%lld,\"n_per_row\":%lld,\"input\":\"input_f32.bin\",\"types\":[",
                     (long long)n_rows, (long long)n_per_row);
  for (size_t t = 0; t < sizeof types / sizeof types[0]; ++t) {
    const enum ggml_type type = types[t];
    const char* name = ggml_type_name(type);
    const size_t row_size = ggml_row_size(type, n_per_row);
    ggml_quantize_init(type);
    const float* imatrix = ggml_quantize_requires_imatrix(type) ? ones : NULL;
    uint8_t* q = malloc(row_size * n_rows);
    ggml_quantize_chunk(type, input, q, 0, n_rows, n_per_row, imatrix);
    write_file(out_dir, name, ".quant.bin", q, row_size * n_rows);

    float* deq = malloc(sizeof(float) * n_rows * n_per_row);
    for (int64_t r = 0; r < n_rows; ++r)
      ggml_get_type_traits(type)->to_float(q + r * row_size, deq + r * n_per_row, n_per_row);
    write_file(out_dir, name, ".dequant_f32.bin", deq, sizeof(float) * n_rows * n_per_row);

    // dots[w * n_rows + a]: quantized row w against input row a in vec_dot_type.
    const struct ggml_type_traits_cpu* cpu = ggml_get_type_traits_cpu(type);
    const enum ggml_type act_type = cpu->vec_dot_type;
    if (act_type != GGML_TYPE_Q8_K) {
      fprintf(stderr, "%s: vec_dot_type %s, expected q8_K\n", name, ggml_type_name(act_type));
      return 1;
    }
    uint8_t* act = malloc(act_row * n_rows);
    for (int64_t r = 0; r < n_rows; ++r)
      ggml_get_type_traits_cpu(act_type)->from_float(input + r * n_per_row, act + r * act_row, n_per_row);
    float* dots = malloc(sizeof(float) * n_rows * n_rows);
    for (int64_t w = 0; w < n_rows; ++w)
      for (int64_t a = 0; a < n_rows; ++a)
        cpu->vec_dot((int)n_per_row, &dots[w * n_rows + a], 0, q + w * row_size, 0, act + a * act_row, 0, 1);
    write_file(out_dir, name, ".dot_f32.bin", dots, sizeof(float) * n_rows * n_rows);
    if (t == 0) write_file(out_dir, ggml_type_name(act_type), ".act.bin", act, act_row * n_rows);

    // Random blocks: rows of random bytes, each block's leading f16 d set to k / 1000, k in 1..1000.
    const int64_t n_random_rows = 16;
    uint8_t* rq = malloc(row_size * n_random_rows);
    for (size_t i = 0; i < row_size * n_random_rows; ++i) rq[i] = (uint8_t)next_random();
    for (size_t off = 0; off < row_size * n_random_rows; off += ggml_type_size(type)) {
      const ggml_fp16_t d = ggml_fp32_to_fp16(0.001f * (float)(1 + next_random() % 1000));
      memcpy(rq + off, &d, sizeof d);
    }
    write_file(out_dir, name, ".random.quant.bin", rq, row_size * n_random_rows);
    float* rdeq = malloc(sizeof(float) * n_random_rows * n_per_row);
    for (int64_t r = 0; r < n_random_rows; ++r)
      ggml_get_type_traits(type)->to_float(rq + r * row_size, rdeq + r * n_per_row, n_per_row);
    write_file(out_dir, name, ".random.dequant_f32.bin", rdeq, sizeof(float) * n_random_rows * n_per_row);
    free(rdeq);
    float* rdots = malloc(sizeof(float) * n_random_rows * n_rows);
    for (int64_t w = 0; w < n_random_rows; ++w)
      for (int64_t a = 0; a < n_rows; ++a)
        cpu->vec_dot((int)n_per_row, &rdots[w * n_rows + a], 0, rq + w * row_size, 0, random_act + a * act_row, 0, 1);
    write_file(out_dir, name, ".random.dot_f32.bin", rdots, sizeof(float) * n_random_rows * n_rows);
    free(rq);
    free(rdots);

    len += snprintf(index + len, sizeof index - len,
                    "%s\n{\"type\":\"%s\",\"ggml_type_id\":%d,\"block_size\":%lld,\"type_size\":%zu,\"row_size\":%zu,"
                    "\"vec_dot_type\":\"%s\",\"imatrix\":%s}",
                    t ? "," : "", name, (int)type, (long long)ggml_blck_size(type), ggml_type_size(type), row_size,
                    ggml_type_name(act_type), imatrix ? "\"ones\"" : "null");
    free(q);
    free(deq);
    free(act);
    free(dots);
  }
  len += snprintf(index + len, sizeof index - len, "\n],\"random_rows\":16}\n");
  write_file(out_dir, "index", ".json", index, (size_t)len);
  return 0;
}
