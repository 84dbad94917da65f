#!/usr/bin/env python3
"""Writes bench/traces/agent-sample.jsonl: a synthetic but realistic coding-agent session.

Each line is one step {"step", "depth", "new_tokens"} plus informational keys the benches ignore
("kind": what the new tokens are, "answer_tokens": what the model generated after them).
depth(i+1) = depth(i) + new_tokens(i) + answer_tokens(i): the conversation only grows, except
at one context compaction (the history is summarised and the session continues from a short
prefix), as agent harnesses do when the window fills. Deterministic (fixed seed).
"""
import json
import os
import random

rng = random.Random(20261130)
N_STEPS = 300
COMPACTION_AT = 190

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
    if i == COMPACTION_AT:
        depth = 2800 + rng.randint(3000, 5000)   # system prompt + summary of the history
        kind = "user"
    elif i == 0 or rng.random() < 0.06:
        kind = "user"
    else:
        kind = rng.choices(["tool_small", "tool_medium", "tool_large"], [0.55, 0.33, 0.12])[0]
    new = new_tokens_for(kind)
    answer = rng.randint(20, 120) if rng.random() < 0.8 else rng.randint(120, 600)  # tool call or prose
    steps.append({"step": i, "depth": depth, "new_tokens": new, "kind": kind, "answer_tokens": answer})
    depth += new + answer

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent-sample.jsonl")
with open(out, "w") as f:
    for s in steps:
        f.write(json.dumps(s) + "\n")
print(f"wrote {out}: {len(steps)} steps, max depth {max(s['depth'] for s in steps)}")
