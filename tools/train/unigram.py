"""The baseline the trained model must beat: a unigram model's perplexity on the held-out split
(token frequencies of the training split, add-one smoothed), with the model's own tokenizer.

    /usr/bin/python3 tools/train/unigram.py --out trained/agentkv-tiny
"""
import argparse
import collections
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import bpe  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="folder with tokenizer.json and heldout.txt")
    args = ap.parse_args()
    enc = bpe.Encoder.from_tokenizer_json(os.path.join(args.out, "tokenizer.json"))
    counts = collections.Counter()
    for d in corpus.documents(held_out=False):
        counts.update(enc.encode(d))
    total, n_vocab = sum(counts.values()), len(enc.vocab)
    with open(os.path.join(args.out, "heldout.txt"), encoding="utf-8") as f:
        held = enc.encode(f.read())
    nll = -sum(math.log((counts[t] + 1) / (total + n_vocab)) for t in held) / len(held)
    print(json.dumps({"unigram_ppl_heldout": round(math.exp(nll), 2), "heldout_tokens": len(held),
                      "training_tokens": total, "n_vocab": n_vocab}))


if __name__ == "__main__":
    main()
