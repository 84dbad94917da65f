#!/usr/bin/env bash
# Fuzzes with libFuzzer (ASan + UBSan): the GGUF reader, the server's JSON request layer (request
# parsing + chat formatting), the parsers of model output (reasoning, tool calls of every format,
# streamed prefixes), the state-file reader (with the KV code file reader), the JSON-schema
# converter's pattern and bounds parsers and image input (PNG / JPEG decoding, Qwen-VL
# preprocessing), for N seconds in all (split between the six targets); exits non-zero if one finds
# a crash.
# Builds build-fuzz/ with clang first if needed. Usage: scripts/fuzz.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
build=build-fuzz

if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAGENTKV_FUZZ=ON
fi
cmake --build "$build" --target gguf_fuzz request_fuzz state_fuzz tool_call_fuzz schema_fuzz image_decode_fuzz \
  -j2

fixtures="${AGENTKV_FIXTURES:-../shared/fixtures}/models"
# Time shares: the GGUF reader half, the five other targets a fifth of the rest each (at least 5 s each).
gguf_s=$(( seconds / 2 > 5 ? seconds / 2 : 5 ))
rest_s=$(( (seconds - gguf_s) / 5 > 5 ? (seconds - gguf_s) / 5 : 5 ))

run() {  # name seconds max_len dict-or-empty seeds...
  local name=$1 secs=$2 max_len=$3 dict=$4
  shift 4
  local corpus="$build/fuzz/$name-corpus" artifacts="$build/fuzz/$name-crashes"  # corpus kept between runs
  mkdir -p "$corpus" "$artifacts"
  echo "fuzzing $name for ${secs}s"
  if ! "$build/fuzz/$name" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
      ${dict:+-dict=$dict} -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" "$@"; then
    echo "fuzz.sh: $name found a problem; the input is in $artifacts/" >&2
    exit 1
  fi
}

# GGUF: small valid files of every value/tensor type, plus the first bytes of real models.
seeds="$build/fuzz/gguf-seeds"
mkdir -p "$seeds"
python3 fuzz/make_gguf_seeds.py "$seeds"
for model in qwen3-micro.gguf qwen35moe-micro-q8_0.gguf; do
  if [ -f "$fixtures/$model" ]; then head -c 4096 "$fixtures/$model" > "$seeds/head-$model"; fi
done
# fuzz/gguf-regressions: inputs that once failed (each is replayed first).
run gguf_fuzz "$gguf_s" 16384 fuzz/gguf.dict "$seeds" fuzz/gguf-regressions

# Requests: the seeds of fuzz/request-seeds (every endpoint's body shapes), the model's template.
export AGENTKV_FUZZ_MODEL="$fixtures/qwen3-micro.gguf"
run request_fuzz "$rest_s" 8192 fuzz/request.dict fuzz/request-seeds

# Model output: the recorded outputs of every tool-call format (tests/data/tool_call_outputs.json),
# each under the byte that picks its format (tool_call_fuzz.cpp), plus the Qwen shapes.
seeds="$build/fuzz/tool-call-seeds"
mkdir -p "$seeds"
python3 - "$seeds" <<'PY'
import json, sys
formats = ["hermes", "qwen-xml", "llama3-json", "mistral-nemo", "mistral-args", "mistral-call-id", "harmony"]
cases = json.load(open("tests/data/tool_call_outputs.json"))["cases"]
cases += [{"format": "hermes", "text": '<think>\nok\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {"s": "x"}}\n</tool_call>'},
          {"format": "qwen-xml", "text": "<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>"}]
for i, c in enumerate(cases):
    open(f"{sys.argv[1]}/seed-{i}", "wb").write(bytes([formats.index(c["format"])]) + c["text"].encode())
PY
# fuzz/tool-call-regressions: inputs that once failed (each is replayed first).
run tool_call_fuzz "$rest_s" 4096 "" "$seeds" fuzz/tool-call-regressions

# States: valid dense and hybrid states written by the target itself.
seeds="$build/fuzz/state-seeds"
mkdir -p "$seeds"
AGENTKV_FUZZ_WRITE_SEEDS="$seeds" "$build/fuzz/state_fuzz" -runs=0 "$seeds" >/dev/null 2>&1 || true
# fuzz/state-regressions: inputs that once crashed the reader (each is replayed first).
run state_fuzz "$rest_s" 65536 "" "$seeds" fuzz/state-regressions

# Schemas: patterns and bounds (schema_fuzz.cpp's first byte picks the case).
seeds="$build/fuzz/schema-seeds"
mkdir -p "$seeds"
python3 - "$seeds" <<'PY'
import sys
cases = [(0, "^[a-z]+(-[0-9]{2,4})?$", "abc-12"), (0, "(?:a|b\\d)*c", "ab1c"), (2, "\\w+@[^@\\s]+\\.org", "x@y.org"),
         (0, "^\\u00e9.{0,3}$", "\u00e9ab"), (1, "-20,300", ""), (5, "0,1", ""), (13, "-1.5,2", "")]
for i, (kind, pattern, value) in enumerate(cases):
    open(f"{sys.argv[1]}/seed-{i}", "wb").write(bytes([kind]) + pattern.encode() + b"\0" + value.encode())
PY
mkdir -p fuzz/schema-regressions
run schema_fuzz "$rest_s" 1024 "" "$seeds" fuzz/schema-regressions

# Images: the PNGs (every colour type and depth, interlaced) and JPEGs (baseline, progressive, gray,
# 4:2:0 / 4:2:2 / 4:4:4, Adobe CMYK and YCCK) the preprocessing tests compare with llama.cpp.
seeds="$build/fuzz/image-seeds"
mkdir -p "$seeds"
cp tests/data/vision/preprocess/*.png tests/data/vision/preprocess/*.jpg "$seeds/"
mkdir -p fuzz/image-regressions  # inputs that once failed (each is replayed first)
run image_decode_fuzz "$rest_s" 65536 "" "$seeds" fuzz/image-regressions
