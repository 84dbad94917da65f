#!/usr/bin/env python3
"""Writes bench/traces/screenshot-sample.jsonl: a synthetic GUI (computer-use) agent session.

Every step appends a new screenshot (1280 x 720, "screenshot": "1280x720": `agentkv bench fakeprefix
--mmproj` encodes a synthetic screen of that size) and a short text (the action's result, the
harness's note), then the model answers with one action. Qwen3.5's vision tower turns a 1280 x 720
screenshot into 920 rows (1280 x 736 pixels, 40 x 23 merged patches), which the depth counts:
depth(i+1) = depth(i) + 920 + new_tokens(i) + answer_tokens(i). When the next step would not fit a
32k window, the harness drops the old screenshots and summarises (system prompt + summary + the
last screenshot), as computer-use harnesses do. Deterministic (fixed seed).
"""
import json
import os
import random

rng = random.Random(20261207)
N_STEPS = 60
WINDOW = 32768
IMAGE_TOKENS = 920  # 1280 x 720 through Qwen3.5's tower

steps = []
depth = 1400 + rng.randint(0, 300)   # system prompt + the computer-use tool definition
for i in range(N_STEPS):
    kind = "task" if i == 0 else rng.choices(["action_result", "error"], [0.9, 0.1])[0]
    new = rng.randint(120, 400) if kind == "task" else rng.randint(15, 120)
    answer = rng.randint(25, 90)     # one tool call: click / type / scroll with its reasoning
    if depth + IMAGE_TOKENS + new + answer > WINDOW:
        depth = 1600 + rng.randint(300, 900) + IMAGE_TOKENS
    steps.append({"step": i, "depth": depth, "new_tokens": new, "screenshot": "1280x720", "kind": kind,
                  "answer_tokens": answer})
    depth += IMAGE_TOKENS + new + answer

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "screenshot-sample.jsonl")
with open(out, "w") as f:
    for s in steps:
        f.write(json.dumps(s) + "\n")
print(f"wrote {out}: {len(steps)} steps, max depth {max(s['depth'] for s in steps)}")
