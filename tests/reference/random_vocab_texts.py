#!/usr/bin/env python3
"""Writes tests/data/vocab/random.inp and random-special.inp: short random texts from pools of
pieces that stress the tokenizers (invalid UTF-8, combining marks, odd spaces, digit runs, special
token texts next to spaces and newlines), in llama.cpp's test-tokenizer-0 layout. The committed
files are the reference; this only says how they were made (see README.md for the ids)."""
import random
import sys

PLAIN = ["a", "Z", "e", "the", "The", " ", "  ", "\t", "\n", "\r\n", "'", "'s", "'LL", "123", "4567", "0", ".", ",",
         "!", "?", "/", "-", "_", "$", "(", ")", "é", "É", "ß", "Ж", "ж", "中", "文", "ア", "한", "ا", "\u0301",
         "\u00a0", "\u3000", "\u2003", "🦙", "😀", "✅", "\u200b", "½", "①", "٣", "Hello", "world", " world", "HTTP",
         "Server", "iPhone", "don't", "<s>", "</s>", "<unk>", "<0x0A>", "▁", "▁▁", b"\xff", b"\xe4\xb8"]
SPECIAL = ["a", "Z", "the", " ", "  ", "\n", "\t", "'s", "123", ".", "é", "中", "🦙", "\u00a0", "Hello", " world",
           "<s>", "</s>", "<unk>", "<|user|>", "<|end|>", "<|assistant|>", "<|endoftext|>", "<|system|>",
           " <|end|> ", "<|end|>\n", "\n<|user|>\n", "<|im_start|>", "<|fim_prefix|>", "▁"]


def write(path, pool, seed, count, max_pieces):
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(count):
            pieces = [rng.choice(pool) for _ in range(rng.randint(1, max_pieces))]
            f.write(b"".join(p if isinstance(p, bytes) else p.encode() for p in pieces))
            f.write(b"\n__ggml_vocab_test__\n")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/vocab"
    write(out + "/random.inp", PLAIN, 7, 200, 20)
    write(out + "/random-special.inp", SPECIAL, 11, 200, 14)
