#!/usr/bin/env python3
"""Writes bench/traces/agent-sample.jsonl: a synthetic but realistic coding-agent session.

Each line is one step {"step", "depth", "new_tokens"} plus informational keys the benches ignore
("kind": what the new tokens are, "answer_tokens": what the model generated after them).
depth(i+1) = depth(i) + new_tokens(i) + answer_tokens(i): the conversation only grows, except at
context compactions: the session runs on a local model with a 16k window, and when the next step
would not fit, the harness summarises the history and continues from a short prefix (system
prompt + summary), as agent harnesses do. A 16k window keeps every step's depth <= 16384, so the
whole trace (with cold baselines) can be measured on a small machine. Deterministic (fixed seed).
"""
import json
import os
import random

rng = random.Random(20261130)
N_STEPS = 300
WINDOW = 16384

def new_tokens_for(kind):
    if kind == "user":
        return rng.randint(50, 400)
    if kind == "tool_small":          # ls, grep hits, test summary
        return rng.randint(50, 350)
    if kind == "tool_medium":         # a source file, a diff
        return rng.randint(350, 1200)
    return rng.randint(1200, 2000)    # tool_large: a long log or a big file read

steps = []
depth = 2600 + rng.randint(0, 400)   # system prompt + tool definitions
for i in range(N_STEPS):
    if i == 0 or rng.random() < 0.06:
        kind = "user"
    else:
        kind = rng.choices(["tool_small", "tool_medium", "tool_large"], [0.55, 0.33, 0.12])[0]
    new = new_tokens_for(kind)
    answer = rng.randint(20, 120) if rng.random() < 0.8 else rng.randint(120, 600)  # tool call or prose
    if depth + new + answer > WINDOW:            # compaction: system prompt + summary of the history
        depth = 2800 + rng.randint(1000, 3000)
    steps.append({"step": i, "depth": depth, "new_tokens": new, "kind": kind, "answer_tokens": answer})
    depth += new + answer

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent-sample.jsonl")
with open(out, "w") as f:
    for s in steps:
        f.write(json.dumps(s) + "\n")
print(f"wrote {out}: {len(steps)} steps, max depth {max(s['depth'] for s in steps)}")
