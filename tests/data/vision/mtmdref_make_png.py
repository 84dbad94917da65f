#!/usr/bin/env python3
"""Writes the deterministic test images that tests/reference/mtmd_reference.cpp was run on
(python3 standard library only: zlib + struct).

    python3 tests/data/vision/mtmdref_make_png.py tests/data/vision

mtmdref-64x48.png: RGB, 8 bit, a horizontal red ramp, a vertical green ramp, blue from x*y, each
channel plus noise from a 32-bit LCG (seed 12345), so that every pixel differs from its neighbours
and the resize + normalization path is exercised on a non-multiple-of-32 size.
mtmdref-40x72.png: the same recipe at 40x72 (portrait; seed 777), for a second image in one prompt.
"""
import struct
import sys
import zlib


def lcg(seed):
    state = seed & 0xFFFFFFFF
    while True:
        state = (1664525 * state + 1013904223) & 0xFFFFFFFF
        yield state >> 24  # top 8 bits


def make_rgb(width, height, seed):
    noise = lcg(seed)
    rows = []
    for y in range(height):
        row = bytearray()
        for x in range(width):
            r = (x * 255) // max(1, width - 1)
            g = (y * 255) // max(1, height - 1)
            b = (x * y * 7) % 256
            px = []
            for base in (r, g, b):
                v = base + (next(noise) % 41) - 20
                px.append(min(255, max(0, v)))
            row += bytes(px)
        rows.append(bytes(row))
    return rows


def png_bytes(width, height, rows):
    def chunk(tag, data):
        c = tag + data
        return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + r for r in rows)  # filter type 0 on every row
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b""))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    for (w, h, seed) in ((64, 48, 12345), (40, 72, 777)):
        with open(f"{out}/mtmdref-{w}x{h}.png", "wb") as f:
            f.write(png_bytes(w, h, make_rgb(w, h, seed)))


if __name__ == "__main__":
    main()
