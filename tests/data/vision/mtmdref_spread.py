#!/usr/bin/env python3
"""llama.cpp's own run-to-run spread between two mtmd_reference output folders (python3 standard
library only):

    python3 tests/data/vision/mtmdref_spread.py DIR_A DIR_B

Prints, per image, the largest |difference| of the preprocessed pixels and of the embeddings (and
the embeddings' largest |value| for scale, and the mean |difference|); then, over prompt_top and the
generated_top lists up to and including the first step where the greedy tokens differ, the largest
and mean |difference| of the log-probabilities of the ids both lists hold, and how many lists agree
on their top-1 id. Exits 1 when the chunk structure (tokens, positions) differs.
"""
import json
import struct
import sys


def floats(path):
    with open(path, "rb") as f:
        data = f.read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def main():
    a_dir, b_dir = sys.argv[1], sys.argv[2]
    a = json.load(open(f"{a_dir}/result.json"))
    b = json.load(open(f"{b_dir}/result.json"))
    if a["chunks"] != b["chunks"]:
        print("chunks differ (tokens, grids or positions)")
        return 1
    for ia, ib in zip(a["images"], b["images"]):
        k = ia["image"]
        pa, pb = floats(f"{a_dir}/{ia['pixels_file']}"), floats(f"{b_dir}/{ib['pixels_file']}")
        ea, eb = floats(f"{a_dir}/{ia['embd_file']}"), floats(f"{b_dir}/{ib['embd_file']}")
        pix = max(abs(x - y) for x, y in zip(pa, pb)) if len(pa) == len(pb) else float("nan")
        diffs = [abs(x - y) for x, y in zip(ea, eb)]
        scale = max(abs(x) for x in ea)
        print(f"image {k}: pixels {ia['pixels_nx']}x{ia['pixels_ny']} max|d| {pix:.3g}; "
              f"embd {ia['n_tokens']}x{ia['n_embd']} max|d| {max(diffs):.3g} mean|d| {sum(diffs) / len(diffs):.3g} "
              f"(max|x| {scale:.4g})")
    lists_a = [a["prompt_top"]] + a["generated_top"][1:]
    lists_b = [b["prompt_top"]] + b["generated_top"][1:]
    n_cmp = 1
    for i in range(len(a["generated"])):
        if i + 1 >= len(lists_a):
            break
        if a["generated"][i] != b["generated"][i]:
            break
        n_cmp = i + 2
    n_cmp = min(n_cmp, len(lists_a), len(lists_b))
    deltas, top1 = [], 0
    for la, lb in zip(lists_a[:n_cmp], lists_b[:n_cmp]):
        db = dict((i, lp) for i, lp in lb)
        deltas += [abs(lp - db[i]) for i, lp in la if i in db]
        top1 += la[0][0] == lb[0][0]
    same = sum(x == y for x, y in zip(a["generated"], b["generated"]))
    print(f"logprobs over {n_cmp} lists: max|d| {max(deltas):.4g} mean|d| {sum(deltas) / len(deltas):.3g}; "
          f"top-1 {top1}/{n_cmp}; greedy tokens equal {same}/{len(a['generated'])}; "
          f"re-encode bitwise equal {a['last_image_reencode_bitwise_equal']}/{b['last_image_reencode_bitwise_equal']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
