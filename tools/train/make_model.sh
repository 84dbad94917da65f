#!/usr/bin/env bash
# Rebuilds the committed trained model (docs/trained-model.md) from Debian's files:
#   tools/train/make_model.sh [OUT_DIR]   (default: trained/agentkv-tiny)
# Installs what training needs (Debian packages only; CI's setup does not), trains on 1 thread
# (~75 min on a 2-core VM in two stages; the other core stays usable), writes the F16 GGUF with agentkv's own
# writer and checks that agentkv computes what PyTorch computes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/trained/agentkv-tiny}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

need=()
for pkg in python3-torch python3-numpy python3-regex libopenblas0-pthread; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  # Without OpenBLAS, Debian's torch runs on the reference BLAS, 20 x slower.
  if [[ $(id -u) -eq 0 ]]; then apt-get install -y -q "${need[@]}"; else sudo apt-get install -y -q "${need[@]}"; fi
fi
[[ -x "$root/build/agentkv" ]] || { cmake -S "$root" -B "$root/build" -G Ninja && ninja -C "$root/build" agentkv; }

# Two stages (train.py's STAGES), the second from the first one's weights: language and answer
# format, then retrieval tasks. (Stage 3 is an experiment that did not help; see docs/trained-model.md.)
/usr/bin/python3 "$here/train.py" --out "$scratch/stage1" --stage 1 --seed 1 --threads 1
/usr/bin/python3 "$here/train.py" --out "$scratch" --stage 2 --init "$scratch/stage1" --seed 2 --threads 1
for n in 1; do
  mv "$scratch/stage$n/train_log.tsv" "$scratch/train_log_stage$n.tsv"
  mv "$scratch/stage$n/summary.json" "$scratch/summary_stage$n.json"
done
"$root/build/agentkv" mkmodel --shape "$scratch/shape.json" --weights "$scratch/weights" \
  --tokenizer "$scratch/tokenizer.json" -o "$scratch/model.gguf"
/usr/bin/python3 "$here/check_export.py" --out "$scratch" --gguf "$scratch/model.gguf" --agentkv "$root/build/agentkv"
# The baseline the model must beat goes into its summary (tests/quality/test_trained_model.py reads it).
/usr/bin/python3 "$here/unigram.py" --out "$scratch" > "$scratch/unigram.json"
/usr/bin/python3 - "$scratch" <<'PY'
import json, sys
d = sys.argv[1]
s = json.load(open(d + "/summary.json"))
s.update(json.load(open(d + "/unigram.json")))
json.dump(s, open(d + "/summary.json", "w"), indent=1)
PY

mkdir -p "$out"
cp "$scratch"/{model.gguf,tokenizer.json,tokenizer_config.json,shape.json,heldout.txt,train_log.tsv,summary.json} "$out/"
cp "$scratch"/{train_log_stage1.tsv,summary_stage1.json} "$out/"
echo "wrote $out"
