"""Seed circuits for a fresh model: a previous-token head pair and an induction head, written into
the initial weights so that retrieval does not have to emerge from SGD alone.

Why: on this project's machines (2 CPU cores, ~1,000 training tokens/s) induction heads never
formed from a random start in several attempts (docs/trained-model.md, "Results"): published runs
see them appear after 10^7-10^8 tokens, hours to days here. So stage 6 starts from weights that
already contain the circuit and trains everything — the circuit included — on text and retrieval
tasks. The layout (E = 256, head width 64, NEOX RoPE):

  residual dims   0..126  the token's own code (the embedding; random as usual)
                  127     a constant every token embedding carries (positional heads' input)
                  128..191  layer 0, head 0 writes the previous token's dims 0..63 here
                  192..255  layer 0, head 1 writes the token two back (dims 0..63) here
  layer 0 KV head 0 (query heads 0, 1): keys and queries read only the constant, with RoPE phases
      that peak one and two positions back: a previous-token head and a previous-previous one.
  layer 1 KV head 0, query head 0: query = (current token, previous token), key = (token before,
      two before), both projected into the 12 lowest-frequency RoPE pairs, where the rotation over
      thousands of positions is negligible (rope_freq_base 1e6, Qwen3's own); value = the token's
      own code, written back into dims 0..63: the classic two-token induction head, so
      "... The pass key is" attends to what followed "pass key is" before and copies it.
Everything else keeps its random initialization. seed() returns the seeded weights as a Held list:
while a stage holds them (train.py: stage 6 holds them in every phase), they are written back after
every optimizer step, so the rest of the model — embeddings' own dimensions, the other heads, the
FFNs, the norms — learns around an intact circuit and learns to use it. Released, the circuit did
not survive: Adam moves every weight by about the learning rate per step, and the seeded weights
that write the previous tokens' codes are as small as the residual's scale (~0.015); pass-key
recall fell from 0.9 to 0 within 50 steps from a fresh start, and within 15 steps when released
after 50 held ones (docs/trained-model.md).
"""
import math

import torch

CONST_DIM = 127
PREV1, PREV2 = slice(128, 192), slice(192, 256)
CODE = slice(0, 64)  # the part of a token's code the heads copy


def _eye_into(w, rows, cols, scale):
    w[rows, cols] = 0
    n = rows.stop - rows.start
    w[rows, cols] += scale * torch.eye(n)


class Held:
    """The seeded parts of the weights, to write back after an optimizer step."""

    def __init__(self):
        self.parts = []  # (parameter, index, values)

    def keep(self, param, index):
        self.parts.append((param, index, param.detach()[index].clone()))

    @torch.no_grad()
    def restore(self):
        for param, index, values in self.parts:
            param[index] = values


def seed(model, cfg, gen, const=0.1, prev_gain=3.0, match_gain=3.0, copy_scale=10.0, prev_pairs=6, out_norm=4.0):
    hd, half = cfg["head_dim"], cfg["head_dim"] // 2
    theta = cfg["rope_freq_base"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    with torch.no_grad():
        emb = model.token_embd.weight
        emb[:, 127:] = 0
        emb[:, CONST_DIM] = const
        # Typical RMS of a layer-0 input: what a value read from it must be scaled by to be written
        # back at the embedding's own scale.
        rms0 = float(emb.pow(2).mean(-1).sqrt().mean())

        # Layer 0: previous-token heads (query heads 0 and 1 share KV head 0).
        b0 = model.blocks[0]
        b0.attn_q.weight[0:2 * hd] = 0
        b0.attn_k.weight[0:hd] = 0
        b0.attn_v.weight[0:hd] = 0
        for f in range(prev_pairs):
            b0.attn_k.weight[f, CONST_DIM] = 1.0  # z_k = 1 in pair f
            for h, d in ((0, 1), (1, 2)):  # z_q = e^{-i d theta_f}: the score peaks d positions back
                b0.attn_q.weight[h * hd + f, CONST_DIM] = math.cos(d * theta[f])
                b0.attn_q.weight[h * hd + f + half, CONST_DIM] = -math.sin(d * theta[f])
            for w in (b0.attn_q_norm.weight, b0.attn_k_norm.weight):
                w[f] = w[f + half] = prev_gain
        _eye_into(b0.attn_v.weight, slice(0, hd), CODE, 1.0)
        b0.attn_output.weight[:, 0:2 * hd] = 0
        _eye_into(b0.attn_output.weight, PREV1, slice(0, hd), rms0)
        _eye_into(b0.attn_output.weight, PREV2, slice(hd, 2 * hd), rms0)
        # Layer 0's other heads and its FFN start by writing only into dims 64..126, so the codes
        # the induction head compares (dims 0..63 and the two previous-token slots) start clean.
        for rows in (CODE, slice(CONST_DIM, 256)):
            b0.attn_output.weight[rows, 2 * hd:] = 0
            b0.ffn_down.weight[rows] = 0

        # Layer 1: the induction head (query head 0, KV head 0), matching in the low-frequency pairs.
        b1 = model.blocks[1]
        low = list(range(half - 12, half))  # the 12 lowest-frequency pairs
        group_a, group_b = low[:6], low[6:]
        dims_a = group_a + [f + half for f in group_a]
        dims_b = group_b + [f + half for f in group_b]
        proj_a = torch.randn(12, 64, generator=gen) / 8
        proj_b = torch.randn(12, 64, generator=gen) / 8
        b1.attn_q.weight[0:hd] = 0
        b1.attn_k.weight[0:hd] = 0
        b1.attn_v.weight[0:hd] = 0
        b1.attn_q.weight[dims_a, CODE] = proj_a            # current token ...
        b1.attn_q.weight[dims_b, PREV1] = proj_b           # ... and the one before it
        b1.attn_k.weight[dims_a, PREV1] = proj_a           # against the key's token before ...
        b1.attn_k.weight[dims_b, PREV2] = proj_b           # ... and two before
        for w in (b1.attn_q_norm.weight, b1.attn_k_norm.weight):
            w[dims_a + dims_b] = match_gain
        _eye_into(b1.attn_v.weight, slice(0, hd), CODE, 1.0)
        b1.attn_output.weight[:, 0:hd] = 0
        _eye_into(b1.attn_output.weight, CODE, slice(0, hd), copy_scale * rms0)
        model.output_norm.weight.fill_(out_norm)

    return held_parts(model, cfg)


def held_parts(model, cfg):
    """The slices of the weights seed() writes, with their current values: what a stage holds (for
    a stage that continues from a seeded model, the circuit as that model has it)."""
    hd = cfg["head_dim"]
    b0, b1 = model.blocks[0], model.blocks[1]
    held = Held()
    held.keep(model.token_embd.weight, (slice(None), slice(CONST_DIM, None)))
    held.keep(b0.attn_q.weight, slice(0, 2 * hd))
    for blk in (b0, b1):
        held.keep(blk.attn_k.weight, slice(0, hd))
        held.keep(blk.attn_v.weight, slice(0, hd))
        held.keep(blk.attn_q_norm.weight, slice(None))
        held.keep(blk.attn_k_norm.weight, slice(None))
    held.keep(b0.attn_output.weight, slice(None))
    held.keep(b0.ffn_down.weight, CODE)
    held.keep(b0.ffn_down.weight, slice(CONST_DIM, None))
    held.keep(b1.attn_q.weight, slice(0, hd))
    held.keep(b1.attn_output.weight, (slice(None), slice(0, hd)))
    return held
