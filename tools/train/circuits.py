"""Seed circuit for a fresh model: three previous-token heads and an induction head, written into
the initial weights so that retrieval does not have to emerge from SGD alone.

Why: on this project's machines (2 CPU cores, ~1,000-3,000 training tokens/s) induction heads never
formed from a random start in several attempts (docs/trained-model.md, "History"): published runs
see them appear after 10^7-10^8 tokens, hours to days here. So stage 6 starts from weights that
already contain the circuit. The layout (E = 256, head width 64, NEOX RoPE):

  residual dims   0..126    the token's own code (the embedding; random as usual)
                  127       a constant every token embedding carries (positional heads' input)
                  128..167  layer 0, query head 0 writes the previous token's dims 0..39 here
                  168..207  layer 0, query head 1: the token two back
                  208..247  layer 0, query head 2: the token three back
  layer 0: keys (both KV heads) and queries read only the constant, with RoPE phases that peak
      one, two and three positions back; values copy a token's dims 0..39. Query head 3 is unused.
  layer 1, KV head 0, query head 0: query = (this token, the one before, the one before that), key
      = (the token before, two before, three before), each token projected to 8 of the 24 dims of
      the 12 lowest-frequency RoPE pairs, where the rotation over thousands of positions is small
      (rope_freq_base 1e6, Qwen3's own); value = the token's own code, written back into dims
      0..39: a three-token induction head, so "... The pass key is" attends to what followed
      "key is" before and copies it, digit after digit. (A two-token context, the first version,
      could not choose between "0 0 -> 0" and "0 0 -> 5" in a key like 30005.)
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
PREV1, PREV2, PREV3 = slice(128, 168), slice(168, 208), slice(208, 248)
NC = 40  # dims of a token's code the heads copy
CODE = slice(0, NC)


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

        # Layer 0: previous-token heads 1, 2 and 3 back (query heads 0, 1 on KV head 0, 2 on KV head 1).
        b0 = model.blocks[0]
        b0.attn_q.weight[:] = 0
        b0.attn_k.weight[:] = 0
        b0.attn_v.weight[:] = 0
        for kvh in (0, 1):
            for f in range(prev_pairs):
                b0.attn_k.weight[kvh * hd + f, CONST_DIM] = 1.0
        for h, d in ((0, 1), (1, 2), (2, 3)):  # z_q = e^{-i d theta_f}: the score peaks d positions back
            for f in range(prev_pairs):
                b0.attn_q.weight[h * hd + f, CONST_DIM] = math.cos(d * theta[f])
                b0.attn_q.weight[h * hd + f + half, CONST_DIM] = -math.sin(d * theta[f])
        for w in (b0.attn_q_norm.weight, b0.attn_k_norm.weight):
            for f in range(prev_pairs):
                w[f] = w[f + half] = prev_gain
        for kvh in (0, 1):
            _eye_into(b0.attn_v.weight, slice(kvh * hd, kvh * hd + NC), CODE, 1.0)
        b0.attn_output.weight[:] = 0
        _eye_into(b0.attn_output.weight, PREV1, slice(0, NC), rms0)
        _eye_into(b0.attn_output.weight, PREV2, slice(hd, hd + NC), rms0)
        _eye_into(b0.attn_output.weight, PREV3, slice(2 * hd, 2 * hd + NC), rms0)
        # Layer 0's FFN starts by writing only into dims 40..126, so the codes the induction head
        # compares (dims 0..39 and the three previous-token slots) start clean.
        for rows in (CODE, slice(CONST_DIM, 256)):
            b0.ffn_down.weight[rows] = 0

        # Layer 1: the induction head (query head 0, KV head 0), matching in the low-frequency pairs.
        b1 = model.blocks[1]
        low = list(range(half - 12, half))
        groups = [low[0:4], low[4:8], low[8:12]]
        dims = [g + [f + half for f in g] for g in groups]
        projs = [torch.randn(8, NC, generator=gen) / math.sqrt(NC) for _ in range(3)]
        b1.attn_q.weight[0:hd] = 0
        b1.attn_k.weight[0:hd] = 0
        b1.attn_v.weight[0:hd] = 0
        for dd, pr, qsrc, ksrc in zip(dims, projs, (CODE, PREV1, PREV2), (PREV1, PREV2, PREV3)):
            b1.attn_q.weight[dd, qsrc] = pr
            b1.attn_k.weight[dd, ksrc] = pr
        for w in (b1.attn_q_norm.weight, b1.attn_k_norm.weight):
            w[dims[0] + dims[1] + dims[2]] = match_gain
        _eye_into(b1.attn_v.weight, slice(0, NC), CODE, 1.0)
        b1.attn_output.weight[:, 0:hd] = 0
        _eye_into(b1.attn_output.weight, CODE, slice(0, NC), copy_scale * rms0)
        model.output_norm.weight.fill_(out_norm)
    return held_parts(model, cfg)


def held_parts(model, cfg):
    """The slices of the weights seed() writes, with their current values: what a stage holds (for
    a stage that continues from a seeded model, the circuit as that model has it)."""
    hd = cfg["head_dim"]
    b0, b1 = model.blocks[0], model.blocks[1]
    held = Held()
    held.keep(model.token_embd.weight, (slice(None), slice(CONST_DIM, None)))
    for w in (b0.attn_q.weight, b0.attn_k.weight, b0.attn_v.weight, b0.attn_output.weight):
        held.keep(w, slice(None))  # all of layer 0's attention
    held.keep(b0.ffn_down.weight, CODE)
    held.keep(b0.ffn_down.weight, slice(CONST_DIM, None))
    for w in (b1.attn_q.weight, b1.attn_k.weight, b1.attn_v.weight):
        held.keep(w, slice(0, hd))
    held.keep(b1.attn_output.weight, (slice(None), slice(0, hd)))
    for blk in (b0, b1):
        held.keep(blk.attn_q_norm.weight, slice(None))
        held.keep(blk.attn_k_norm.weight, slice(None))
    return held
