"""Trains agentkv's quality-bench model (docs/trained-model.md) and writes its weights for
`agentkv mkmodel --shape --weights`.

    /usr/bin/python3 tools/train/train.py --out OUT [--seed 1] [--threads 2]

OUT receives tokenizer.json, tokenizer_config.json, heldout.txt, shape.json, weights/*.f32,
train_log.tsv and summary.json. Deterministic by seed (same threads, same torch build).
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402
import circuits  # noqa: E402
from model import Qwen3  # noqa: E402
from tasks import NEEDLE, QUESTION, TaskMaker  # noqa: E402

SHAPE = {"base": "qwen3-tiny", "name": "agentkv-tiny-trained", "general_name": "agentkv-tiny-trained",
         "description": "trained on Debian text + retrieval tasks: E=256, 4 layers, 4/2 heads, FFN 768",
         "n_embd": 256, "n_layer": 4, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 768,
         "n_vocab": 4096, "rope_freq_base": 10000.0, "rms_eps": 1e-6, "context_length": 4096}
# Two stages, each (sequence length, batch, steps) phases with a task mix (plain text, pass-key,
# key-value recall[, copy]). Stage 1 learns the language and the answer format; stage 2 starts
# from stage 1's weights (a fresh optimizer) and is where retrieval forms: short sequences full
# of retrievals (copies of earlier spans, key-value recall, pass keys), then longer ones.
STAGES = {
    # Stage 1 was planned with two longer phases after this one (cut when it showed no retrieval),
    # so its cosine schedule spans 710 steps: kept, so the committed model is reproduced exactly.
    1: {"phases": [(512, 8, 600)], "mix": (0.3, 0.35, 0.35), "lr": 3e-3, "warmup": 50, "schedule_steps": 710},
    2: {"phases": [(256, 16, 450), (1024, 4, 60)], "mix": (0.2, 0.25, 0.25, 0.3), "lr": 2e-3, "warmup": 20},
    # Stages 1-2 formed no retrieval at all (copies predicted no better than first occurrences); a
    # pure-copy probe showed induction forming at lr 1e-3 within ~100 steps but not at 3e-3. So:
    # stage 3, from stage 2's weights, at 1e-3, with more copies (half of them of random tokens).
    # Tried: still no retrieval after 350 of its steps; not part of the committed model.
    3: {"phases": [(256, 16, 400), (1024, 4, 40)], "mix": (0.1, 0.25, 0.25, 0.4), "lr": 1e-3, "warmup": 10,
        "random_copy_share": 0.5},
    # Stage 4, from stage 2's weights: induction first, on sequences of random tokens with a
    # repeat (a random period, or one span again later) that only retrieval predicts; then the
    # task mix at 256 tokens, then longer sequences for recall at depth. (The earlier pure-copy
    # probe's "induction" was a copy at one fixed distance, which a positional head solves; with
    # varying distances stage 2's weights stayed at chance for 300 steps.) A phase may carry its
    # own mix (plain, pass-key, key-value, copy, random copy).
    4: {"phases": [(64, 32, 1500, (0, 0, 0, 0, 1)), (256, 16, 300, (0.35, 0.25, 0.15, 0.1, 0.15)),
                   (1024, 4, 100, (0.35, 0.35, 0.15, 0.05, 0.1)), (2048, 2, 40, (0.4, 0.4, 0.1, 0.0, 0.1))],
        "lr": 1e-3, "warmup": 10},
    # Stage 6 (the committed model): a fresh model with a seeded retrieval circuit (circuits.py:
    # previous-token heads and a three-token induction head, matching in the lowest RoPE
    # frequencies) and Qwen3's own rope_freq_base 1e6, so the low-frequency pairs stay nearly
    # unrotated over 4k positions. The seeded weights are held (written back after every optimizer
    # step, circuits.Held) while everything else trains on the task mix; --init only lends the
    # tokenizer and held-out split (the vocabulary of stages 1-2, so the bench's text and tokens are
    # unchanged).
    6: {"phases": [(256, 16, 500, (0.45, 0.2, 0.15, 0.1, 0.0, 0.1), 4093),
                   (1024, 4, 150, (0.45, 0.25, 0.15, 0.05, 0.0, 0.1), 4093)],
        "lr": 2e-3, "warmup": 50, "fresh": True, "seed_circuits": True, "hold_phases": 2,
        "shape": {"rope_freq_base": 1e6, "description": "trained on Debian text + retrieval tasks from a seeded "
                  "induction circuit: E=256, 4 layers, 4/2 heads, FFN 768, RoPE base 1e6"}},
}
WEIGHT_DECAY = 0.1


def lr_at(step, total, lr, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))


def build_tokenizer(out, vocab_size):
    docs = corpus.documents(held_out=False)
    merges = bpe.train([d[:20000] for d in docs], vocab_size)  # the head of every file: a balanced sample
    enc = bpe.Encoder(merges)
    bpe.write_hf_files(enc, os.path.join(out, "tokenizer.json"), os.path.join(out, "tokenizer_config.json"))
    eot = enc.special("<|endoftext|>")
    stream = []
    for d in docs:
        stream += enc.encode(d) + [eot]
    with open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(corpus.documents(held_out=True)))
    return enc, stream


@torch.no_grad()
def passkey_accuracy(model, enc, stream, rng, depth, n_cases):
    """Greedy recall of the pass key at one depth (as the bench asks, in token space)."""
    hits = 0
    for _ in range(n_cases):
        key = str(rng.randrange(10000, 100000))
        needle, question = enc.encode(NEEDLE.format(k=key)), enc.encode(QUESTION)
        start = rng.randrange(0, len(stream) - depth)
        filler = stream[start:start + depth - len(needle) - len(question)]
        at = int(len(filler) * rng.uniform(0.05, 0.95))
        toks = filler[:at] + needle + filler[at:] + question
        for _ in range(6):
            logits = model(torch.tensor([toks]))[0, -1]
            toks.append(int(logits.argmax()))
        hits += enc.decode(toks[-6:]).strip().startswith(key)
    return hits / n_cases


def load_weights(model, folder):
    """Stage 2 starts from the weights stage 1 exported."""
    with torch.no_grad():
        for name, p in model.gguf_tensors().items():
            v = np.fromfile(os.path.join(folder, "weights", name + ".f32"), dtype="<f4").reshape(p.shape)
            p.copy_(torch.from_numpy(v))


def export(model, cfg, out):
    wdir = os.path.join(out, "weights")
    os.makedirs(wdir, exist_ok=True)
    for name, p in model.gguf_tensors().items():
        p.detach().to(torch.float32).contiguous().numpy().astype("<f4").tofile(os.path.join(wdir, name + ".f32"))
    with open(os.path.join(out, "shape.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every phase's steps (a quick check: 0.02)")
    ap.add_argument("--stage", type=int, default=1, choices=sorted(STAGES))
    ap.add_argument("--init", help="the folder an earlier stage wrote: its weights and tokenizer (a fresh stage takes only the tokenizer and held-out split; without --init it builds them)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t_start = time.time()

    stage = STAGES[args.stage]
    if args.stage > 1 and not stage.get("fresh") and not args.init:
        ap.error(f"--stage {args.stage} needs --init STAGE_DIR")
    if args.init:  # the same tokenizer and corpus stream as stage 1
        enc = bpe.Encoder.from_tokenizer_json(os.path.join(args.init, "tokenizer.json"))
        for name in ("tokenizer.json", "tokenizer_config.json", "heldout.txt"):
            with open(os.path.join(args.init, name), "rb") as src, open(os.path.join(args.out, name), "wb") as dst:
                dst.write(src.read())
        eot = enc.special("<|endoftext|>")
        stream = []
        for d in corpus.documents(held_out=False):
            stream += enc.encode(d) + [eot]
    else:
        enc, stream = build_tokenizer(args.out, SHAPE["n_vocab"])
    print(f"corpus: {len(stream)} training tokens, tokenizer {len(enc.vocab)} tokens, {time.time() - t_start:.0f} s",
          flush=True)
    cfg = dict(SHAPE, **stage.get("shape", {}))
    model = Qwen3(cfg)
    held = None
    if stage.get("seed_circuits"):
        held = circuits.seed(model, cfg, torch.Generator().manual_seed(args.seed))
    if args.init and not stage.get("fresh"):  # a fresh stage takes only --init's tokenizer and split
        load_weights(model, args.init)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=stage["lr"], betas=(0.9, 0.95))
    tasks = TaskMaker(enc, stream)
    tasks.random_copy_share = stage.get("random_copy_share", 0.0)
    phases = [(p[0], p[1], max(1, round(p[2] * args.scale)), p[3] if len(p) > 3 else stage["mix"],
               p[4] if len(p) > 4 else tasks.repeat_alphabet) for p in stage["phases"]]
    lr, warmup = stage["lr"], stage["warmup"]
    total = stage.get("schedule_steps", sum(p[2] for p in phases))
    log = open(os.path.join(args.out, "train_log.tsv"), "w")
    log.write("step\tseq_len\tloss\tlr\ttokens\telapsed_s\n")
    step, tokens, evals = 0, 0, []
    for phase_no, (seq_len, batch, n_steps, mix, alphabet) in enumerate(phases):
        tasks.repeat_alphabet = alphabet
        hold = held is not None and phase_no < stage.get("hold_phases", 0)
        for _ in range(n_steps):
            t0 = time.time()
            seqs = torch.tensor([tasks.sample(rng, seq_len + 1, mix) for _ in range(batch)])
            for g in opt.param_groups:
                g["lr"] = lr_at(step, total, lr, warmup)
            logits = model(seqs[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), seqs[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if hold:
                held.restore()
            step += 1
            tokens += batch * seq_len
            if step % 10 == 0 or step == total:
                el = time.time() - t_start
                log.write(f"{step}\t{seq_len}\t{loss.item():.4f}\t{lr_at(step - 1, total, lr, warmup):.2e}\t{tokens}\t{el:.0f}\n")
                log.flush()
                print(f"step {step}/{total} T={seq_len} loss {loss.item():.3f} {batch * seq_len / (time.time() - t0):.0f} tok/s "
                      f"{el / 60:.1f} min", flush=True)
            if step % 50 == 0:  # is retrieval forming? (cheap: 8 cases at 256 tokens)
                acc = passkey_accuracy(model, enc, stream, random.Random(step), 256, 8)
                log.write(f"# step {step}: pass-key at 256 tokens {acc:.2f}\n")
                print(f"step {step}: pass-key at 256 tokens {acc:.2f}", flush=True)
        acc = passkey_accuracy(model, enc, stream, random.Random(7), seq_len, 10)
        evals.append({"after_phase_seq_len": seq_len, "step": step, "passkey_train_text_acc": acc})
        print(f"phase T={seq_len} done: pass-key (training text) {acc:.2f}", flush=True)
        export(model, cfg, args.out)  # a usable model after every phase
    init = os.path.basename(args.init.rstrip("/")) if args.init else None
    summary = {"stage": args.stage, "init": init,
               "seed": args.seed, "threads": args.threads, "torch": torch.__version__, "n_params": n_params,
               "training_tokens_seen": tokens, "corpus_training_tokens": len(stream), "phases": phases,
               "phase_mixes_plain_passkey_kv_copy_randomcopy_repeat": [p[3] for p in phases],
               "phase_repeat_alphabets": [p[4] for p in phases], "lr": lr, "warmup": warmup, "weight_decay": WEIGHT_DECAY,
               "wall_time_s": round(time.time() - t_start), "evals": evals, "final_loss": loss.item()}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
