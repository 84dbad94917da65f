#!/usr/bin/env bash
# Rebuilds the committed trained model (docs/trained-model.md) from Debian's files:
#   tools/train/make_model.sh [OUT_DIR]   (default: trained/agentkv-tiny)
# Installs what training needs (Debian packages only; CI's setup does not), trains on 1 thread
# (~25 min on a 2-core VM; the other core stays usable), writes the F16 GGUF with agentkv's own
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

# Stage 6 of train.py's STAGES: the tokenizer, then a fresh model with a seeded (and held) retrieval
# circuit trained on text and retrieval tasks (docs/trained-model.md; stages 1-5 are the earlier
# attempts, kept so their runs can be reproduced).
/usr/bin/python3 "$here/train.py" --out "$scratch" --stage 6 --seed 1 --threads 1
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
/usr/bin/python3 "$here/plot_loss.py" "$out/train_log.tsv" "$out/train_loss.svg"
echo "wrote $out"
