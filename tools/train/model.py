"""A Qwen3-architecture transformer in PyTorch with exactly the numerics llama.cpp's `qwen3` graph
uses: RMSNorm (eps 1e-6), per-head RMSNorm on Q and K, NEOX RoPE (rotate halves), GQA (query head h
reads KV head h // (n_head / n_head_kv)), SwiGLU FFN, output tied to the token embedding.
Tensor names map one to one onto the GGUF names (export.py).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(n_pos, head_dim, theta):
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = torch.arange(n_pos, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    """x: (batch, heads, time, head_dim); NEOX: dimension i pairs with i + head_dim/2."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, h, kv, hd, ff, eps = cfg["n_embd"], cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"], cfg["n_ff"], cfg["rms_eps"]
        self.h, self.kv, self.hd = h, kv, hd
        self.attn_norm = RMSNorm(d, eps)
        self.attn_q = nn.Linear(d, h * hd, bias=False)
        self.attn_k = nn.Linear(d, kv * hd, bias=False)
        self.attn_v = nn.Linear(d, kv * hd, bias=False)
        self.attn_q_norm = RMSNorm(hd, eps)
        self.attn_k_norm = RMSNorm(hd, eps)
        self.attn_output = nn.Linear(h * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, eps)
        self.ffn_gate = nn.Linear(d, ff, bias=False)
        self.ffn_up = nn.Linear(d, ff, bias=False)
        self.ffn_down = nn.Linear(ff, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        y = self.attn_norm(x)
        q = self.attn_q_norm(self.attn_q(y).view(b, t, self.h, self.hd)).transpose(1, 2)
        k = self.attn_k_norm(self.attn_k(y).view(b, t, self.kv, self.hd)).transpose(1, 2)
        v = self.attn_v(y).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.h // self.kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd)) + mask
        a = att.softmax(-1) @ v
        x = x + self.attn_output(a.transpose(1, 2).reshape(b, t, self.h * self.hd))
        y = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(y)) * self.ffn_up(y))


class Qwen3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.token_embd = nn.Embedding(cfg["n_vocab"], cfg["n_embd"])
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["n_layer"]))
        self.output_norm = RMSNorm(cfg["n_embd"], cfg["rms_eps"])
        self._rope = {}
        for name, p in self.named_parameters():
            if p.dim() == 2:  # matrices N(0, 0.02); the residual outputs scaled down by depth (GPT-2)
                std = 0.02 / math.sqrt(2 * cfg["n_layer"]) if name.endswith(("attn_output.weight", "ffn_down.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, tokens):
        t = tokens.shape[1]
        if t not in self._rope:
            cos, sin = rope_tables(t, self.cfg["head_dim"], self.cfg["rope_freq_base"])
            mask = torch.full((t, t), float("-inf")).triu(1)
            self._rope = {t: (cos, sin, mask)}
        cos, sin, mask = self._rope[t]
        x = self.token_embd(tokens)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.output_norm(x) @ self.token_embd.weight.T

    def gguf_tensors(self):
        """{GGUF tensor name: tensor}; a Linear's (out, in) weight is ggml's ne = [in, out]."""
        out = {"token_embd.weight": self.token_embd.weight, "output_norm.weight": self.output_norm.weight}
        for i, blk in enumerate(self.blocks):
            for name, p in blk.named_parameters():
                out[f"blk.{i}.{name}"] = p
        return out
