#!/usr/bin/env bash
# The CPU speed figures of BENCHMARKS.md ("Dense Qwen3-0.6B shape and scaled-down qwen35moe"), in one
# run: generates the random-weight models of the issue's shapes if missing, then runs every
# `agentkv bench` command of that section. Run it on an idle machine; it takes ~20 minutes on 2 cores.
#   bench/cpu_figures.sh [BUILD_DIR=build] [MODEL_DIR=models/bench] > figures.md
set -euo pipefail
BUILD=${1:-build}
MODELS=${2:-models/bench}
AGENTKV="$BUILD/agentkv"
THREADS=${THREADS:-2}
REPS=${REPS:-3}
mkdir -p "$MODELS"

model() {  # model PRESET TYPE -> path, generated once (seed 1, as in BENCHMARKS.md)
  local path="$MODELS/$1-$2.gguf"
  [[ -f "$path" ]] || "$AGENTKV" mkmodel --preset "$1" --type "$2" --seed 1 -o "$path" >&2
  echo "$path"
}

run() {
  echo
  echo "\`agentkv bench $*\` ($(date -u +%H:%M) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  "$AGENTKV" bench "$@" | grep -v '^resident memory' | sed '/^$/d'
}

echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
for type in q8_0 q4_k_m f16; do
  run -m "$(model qwen3-0.6b "$type")" -p 512 -n 128 -r "$REPS" -t "$THREADS" --bandwidth
done
Q8=$(model qwen3-0.6b q8_0)
MOE=$(model qwen35moe-bench q8_0)
run -m "$Q8" -p 0 -n 64 -np 4 -r "$REPS" -t "$THREADS" --bandwidth
run -m "$Q8" -p 512 -n 32 -d 4096,16384 -r "$REPS" -t "$THREADS" --split
run -m "$Q8" -p 32 -n 0 -d 8192 -r "$REPS" -t "$THREADS" --split   # an agent's next turn over a long history
run -m "$MOE" -p 512 -n 128 -d 0,4096,16384 -r "$REPS" -t "$THREADS" --split
