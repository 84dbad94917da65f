// What the reference-vector programs (iq_quant_reference.c, mxfp4_reference.c) share: a fixed
// random generator (xorshift64*, so the vectors are the same on every run), heavy-tailed floats,
// and writing a whole file. Each program is one translation unit; not part of agentkv's build.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline uint64_t next_random(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}
// Heavy-tailed floats: a uniform sign and magnitude over six octaves.
static inline float heavy_tailed(void) {
  const double u = (double)(next_random() >> 11) / 9007199254740992.0;
  const double v = (double)(next_random() >> 11) / 9007199254740992.0;
  const double magnitude = (0.25 + 0.75 * u) * (double)(1u << (next_random() % 6));
  return (float)(v < 0.5 ? -magnitude : magnitude);
}

// Writes DIR/NAME SUFFIX, or exits.
static inline void write_file(const char* dir, const char* name, const char* suffix, const void* data, size_t bytes) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s%s", dir, name, suffix);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(data, 1, bytes, f) != bytes) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
  fclose(f);
}

// The programs' command line, INPUT_F32 N_ROWS N_PER_ROW OUT_DIR: reads N_ROWS x N_PER_ROW floats,
// or exits with a message.
static inline float* read_input(int argc, char** argv, int64_t* n_rows, int64_t* n_per_row, const char** out_dir) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s INPUT_F32 N_ROWS N_PER_ROW OUT_DIR\n", argv[0]);
    exit(2);
  }
  *n_rows = atoll(argv[2]);
  *n_per_row = atoll(argv[3]);
  *out_dir = argv[4];
  const size_t count = (size_t)(*n_rows * *n_per_row);
  float* input = malloc(sizeof(float) * (count ? count : 1));
  FILE* f = fopen(argv[1], "rb");
  if (!input || !f || fread(input, sizeof(float), count, f) != count) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    exit(1);
  }
  fclose(f);
  return input;
}
