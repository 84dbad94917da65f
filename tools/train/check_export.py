"""Checks that agentkv computes what PyTorch computes for the exported model: the same tokens for
the same text (tokenizer) and the same next-token log-probabilities (graph).

    /usr/bin/python3 tools/train/check_export.py --out OUT --gguf MODEL.gguf --agentkv build/agentkv

The PyTorch side uses the weights rounded to f16 as the GGUF stores matrices, so what remains is
accumulation-order noise; the check fails above --tolerance (max |Δ logprob| over the top tokens).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
from model import Qwen3  # noqa: E402

PROMPTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n        return n\n",
    "The pass key is 48213. Remember it. 48213 is the pass key.\n" + "import os\nimport sys\n" * 20 +
    "\nWhat is the pass key? The pass key is",
    "#include <stdio.h>\n\nint main(void) {\n    printf(\"hello, world\\n\");\n",
]


def load_model(out):
    with open(os.path.join(out, "shape.json")) as f:
        cfg = json.load(f)
    model = Qwen3(cfg)
    with torch.no_grad():
        for name, p in model.gguf_tensors().items():
            v = np.fromfile(os.path.join(out, "weights", name + ".f32"), dtype="<f4").reshape(p.shape)
            if v.ndim == 2:
                v = v.astype(np.float16).astype(np.float32)
            p.copy_(torch.from_numpy(v))
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--agentkv", default="build/agentkv")
    ap.add_argument("--tolerance", type=float, default=2e-2)
    args = ap.parse_args()
    enc, model = bpe.Encoder.from_tokenizer_json(os.path.join(args.out, "tokenizer.json")), load_model(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        prompts = os.path.join(tmp, "prompts.txt")
        with open(prompts, "w", encoding="utf-8") as f:
            f.write("\n@@@@\n".join(PROMPTS))
        report = json.loads(subprocess.run([args.agentkv, "logits", "-m", args.gguf, "--prompts", prompts, "--top", "5",
                                            "--n-gen", "1"], check=True, capture_output=True, text=True).stdout)
    worst, failures = 0.0, []
    for text, case in zip(PROMPTS, report["cases"]):
        tokens = enc.encode(text)
        if tokens != case["prompt_tokens"]:
            failures.append(f"tokenizer differs on {text[:30]!r}: {tokens[:12]} vs {case['prompt_tokens'][:12]}")
            continue
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([tokens]))[0], dim=-1)
        for pos, top in enumerate(case["prompt_top"]):
            ours = int(logprobs[pos].argmax())
            # A different argmax counts only when PyTorch does not see a near tie.
            if top[0][0] != ours and float(logprobs[pos, ours] - logprobs[pos, top[0][0]]) > args.tolerance:
                failures.append(f"top-1 differs at position {pos} of {text[:30]!r}")
            for token, lp in top:
                worst = max(worst, abs(lp - float(logprobs[pos, token])))
    print("\n".join(failures + [f"{len(PROMPTS)} prompts: max |Δ logprob| over agentkv's top 5 = {worst:.2e}"]))
    if failures or worst > args.tolerance:
        sys.exit(1)


if __name__ == "__main__":
    main()
