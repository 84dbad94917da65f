#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer (ASan + UBSan) for N seconds; exits non-zero if it finds a crash.
# Builds build-fuzz/ with clang first if needed. Usage: scripts/fuzz.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
build=build-fuzz

if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTKV_FUZZ=ON
fi
cmake --build "$build" --target gguf_fuzz -j2

# Seeds: small valid files of every value/tensor type, plus the first bytes of real models.
seeds="$build/fuzz/gguf-seeds"
corpus="$build/fuzz/gguf-corpus"     # what libFuzzer finds is kept here between runs
artifacts="$build/fuzz/gguf-crashes"
mkdir -p "$seeds" "$corpus" "$artifacts"
python3 fuzz/make_gguf_seeds.py "$seeds"
fixtures="${AGENTKV_FIXTURES:-../shared/fixtures}/models"
for model in qwen3-micro.gguf qwen35moe-micro-q8_0.gguf; do
  if [ -f "$fixtures/$model" ]; then head -c 4096 "$fixtures/$model" > "$seeds/head-$model"; fi
done

echo "fuzzing the GGUF reader for ${seconds}s"
if ! "$build/fuzz/gguf_fuzz" -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
    -dict=fuzz/gguf.dict -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" "$seeds"; then
  echo "fuzz.sh: gguf_fuzz found a problem; the input is in $artifacts/" >&2
  exit 1
fi
