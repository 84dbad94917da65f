"""Reads the F32 / F16 tensors of a GGUF file (the trained model's own layout) into numpy arrays, so
a training stage can start from a committed model.gguf (train.py --init-gguf)."""
import struct

import numpy as np

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_DTYPE = {0: np.float32, 1: np.float16}  # ggml type ids of the tensors this reader takes


def _read(f, fmt):
    return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]


def _string(f):
    return f.read(_read(f, "<Q")).decode("utf-8")


def _value(f, vtype):
    if vtype == 8:
        return _string(f)
    if vtype == 9:
        item_type, n = _read(f, "<I"), _read(f, "<Q")
        return [_value(f, item_type) for _ in range(n)]
    return _read(f, _SCALAR[vtype])


def read_tensors(path):
    """{tensor name: float32 array shaped (ne[n-1], ..., ne[0])}: a Linear's (out, in) weight."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, n_tensors, n_kv = _read(f, "<I"), _read(f, "<Q"), _read(f, "<Q")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        meta = {}
        for _ in range(n_kv):
            key = _string(f)
            meta[key] = _value(f, _read(f, "<I"))
        infos = []
        for _ in range(n_tensors):
            name = _string(f)
            dims = [_read(f, "<Q") for _ in range(_read(f, "<I"))]
            infos.append((name, dims, _read(f, "<I"), _read(f, "<Q")))
        align = meta.get("general.alignment", 32)
        data_start = (f.tell() + align - 1) // align * align
        out = {}
        for name, dims, ggml_type, offset in infos:
            if ggml_type not in _DTYPE:
                raise ValueError(f"{path}: tensor {name} has ggml type {ggml_type} (only F32 / F16 are read)")
            count = int(np.prod(dims))
            f.seek(data_start + offset)
            arr = np.frombuffer(f.read(count * np.dtype(_DTYPE[ggml_type]).itemsize), dtype=_DTYPE[ggml_type])
            out[name] = arr.astype(np.float32).reshape(list(reversed(dims)))
        return out
