"""The training corpus: text that Debian packages ship, listed so anyone rebuilds the same bytes.

Files are taken in sorted path order; a file is held out (never trained on) when the CRC-32 of its
path is 0 modulo HELD_OUT_MODULUS, so the split is by file and stable across machines.
"""
import glob
import os
import unicodedata
import zlib

# (Debian package, root, glob under it, path fragments to skip)
SOURCES = [
    ("libpython3.11-stdlib, libpython3.11-minimal", "/usr/lib/python3.11", "**/*.py",
     ("/test/", "/tests/", "/idlelib/", "/site-packages/", "/dist-packages/", "/lib2to3/")),
    ("libc6-dev", "/usr/include", "*.h", ()),
    ("base-files", "/usr/share/common-licenses", "*", ()),
]
HELD_OUT_MODULUS = 50
MAX_FILE_BYTES = 400_000  # a few generated tables would otherwise dominate


def corpus_files():
    """[(path, is_held_out)] in a fixed order."""
    out = []
    for _package, root, pattern, skip in SOURCES:
        for path in sorted(glob.glob(os.path.join(root, pattern), recursive=True)):
            if not os.path.isfile(path) or os.path.islink(path) or any(s in path for s in skip):
                continue
            if os.path.getsize(path) > MAX_FILE_BYTES:
                continue
            out.append((path, zlib.crc32(path.encode()) % HELD_OUT_MODULUS == 0))
    return out


def read_text(path):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    return unicodedata.normalize("NFC", text)


def documents(held_out):
    """The texts of the train (held_out=False) or held-out split, in corpus order."""
    return [read_text(p) for p, h in corpus_files() if h == held_out]


if __name__ == "__main__":
    files = corpus_files()
    for split in (False, True):
        docs = [read_text(p) for p, h in files if h == split]
        print(("held-out" if split else "train"), len(docs), "files", sum(len(d) for d in docs), "chars")
