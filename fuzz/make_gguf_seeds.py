#!/usr/bin/env python3
"""Writes small valid GGUF files as a seed corpus for the gguf_fuzz target (independent of agentkv's
own writer, so the seeds also cross-check it): every metadata value type, a nested array, tensors of
several types, versions 2 and 3, default and explicit alignment.  Usage: make_gguf_seeds.py OUT_DIR"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?",
          U64: "Q", I64: "q", F64: "d"}
# ggml type id: (block size, bytes per block)
TYPES = {0: (1, 4), 1: (1, 2), 8: (32, 34), 12: (256, 144), 26: (1, 4)}


def s(text):
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def value(t, v):
    if t == STRING:
        return s(v)
    if t == ARRAY:
        elem, items = v
        out = struct.pack("<IQ", elem, len(items))
        return out + b"".join(value(elem, x) for x in items)
    return struct.pack("<" + SCALAR[t], v)


def gguf(kv, tensors, version=3, alignment=32):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
    for key, t, v in kv:
        out += s(key) + struct.pack("<I", t) + value(t, v)
    offset, data = 0, b""
    for name, ggml_type, ne in tensors:
        block, size = TYPES[ggml_type]
        n = 1
        for d in ne:
            n *= d
        nbytes = n // block * size
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", ggml_type, offset)
        blob = bytes((i * 37 + 11) & 0xFF for i in range(nbytes))
        blob += b"\0" * (-len(blob) % alignment)
        data += blob
        offset += len(blob)
    out += b"\0" * (-len(out) % alignment)
    return out + data


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    every_type = [
        ("general.architecture", STRING, "qwen3"),
        ("v.u8", U8, 7), ("v.i8", I8, -7), ("v.u16", U16, 700), ("v.i16", I16, -700),
        ("v.u32", U32, 70000), ("v.i32", I32, -70000), ("v.f32", F32, 0.5), ("v.bool", BOOL, True),
        ("v.u64", U64, 1 << 40), ("v.i64", I64, -(1 << 40)), ("v.f64", F64, 0.25),
        ("a.str", ARRAY, (STRING, ["a", "bc", ""])), ("a.i32", ARRAY, (I32, [1, -2, 3])),
        ("a.f32", ARRAY, (F32, [1.0, 2.0])), ("a.bool", ARRAY, (BOOL, [True, False])),
        ("a.u64", ARRAY, (U64, [5])), ("a.nested", ARRAY, (ARRAY, [(I32, [1, 2]), (STRING, ["x"])])),
    ]
    tensors = [("token_embd.weight", 1, [8, 4]), ("blk.0.attn_q.weight", 8, [64, 2]),
               ("blk.0.ffn_down.weight", 12, [256]), ("output_norm.weight", 0, [8]), ("ids", 26, [2, 1, 1, 2])]
    seeds = {
        "every-type.gguf": gguf(every_type, tensors),
        "v2.gguf": gguf(every_type[:3], tensors[:2], version=2),
        "align64.gguf": gguf([("general.alignment", U32, 64)] + every_type[:2], tensors[1:3], alignment=64),
        "empty.gguf": gguf([], []),
    }
    for name, blob in seeds.items():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
