"""Issue 16's shared compressed pool: 16 sessions on one 8,192-token prefix hold one copy of it, in
whatever KV type the cache stores (tq4 / tq3, the calibrated tqc3 and the PolyKV splits `-ctk q8_0
-ctv tq3` / `tqc3` included).

Per KV type the server (the fixture qwen3-tiny: 4 layers, 2 KV heads of width 64) answers 16
sessions that send the same prefix and their own short question; /metrics' memory_bytes (K/V rows
held, each shared cell counted once) is read after the first session and after all 16. The pool
holds the prefix once (16 sessions cost at most the first one's bytes plus their questions), and
the bytes per cell are the type's row sizes. Run with -s to print the table BENCHMARKS.md keeps.
"""

import os

import pytest

from conftest import FIXTURES, Server, needs_fixtures
from test_kv_code import calibrate
from test_shared_prefix import metric, system_prompt, text, tokenize

MODEL = os.path.join(FIXTURES, "models", "qwen3-tiny-q4_k_m.gguf")
PREFIX = 8192
SESSIONS = 16
N_LAYER, N_EMBD_KV = 4, 2 * 64  # the fixture's attention layers and K (= V) row width
# Bytes of a row of 64 elements per type (docs/quant-types.md).
ROW64 = {"f16": 128, "q8_0": 68, "q4_0": 36, "tq4": 34, "tq3": 26, "tqc3": 26}
TYPES = ["f16", "q8_0", "q4_0", "tq4", "tq3", "q8_0/tq3", "tqc3", "q8_0/tqc3"]
RESULTS = {}


def cell_bytes(kv):
    k, v = kv.split("/") if "/" in kv else (kv, kv)
    return N_LAYER * (ROW64[k] + ROW64[v]) * N_EMBD_KV // 64


@pytest.fixture(scope="module")
def kv_code(tmp_path_factory):
    """tqc3's code for the fixture, fitted once for the module."""
    return calibrate(tmp_path_factory.mktemp("code"))[0]


@needs_fixtures
@pytest.mark.parametrize("kv", TYPES)
def test_sixteen_sessions_hold_one_compressed_copy_of_their_prefix(kv, tmp_path, request):
    k, v = kv.split("/") if "/" in kv else (kv, kv)
    code = ["--kv-code", str(request.getfixturevalue("kv_code"))] if "tqc3" in kv else []
    server = Server(tmp_path, "-np", str(SESSIONS), "-c", str(PREFIX + SESSIONS * 256), "--metrics",
                    "-ctk", k, "-ctv", v, *code, model=MODEL)
    try:
        prefix = system_prompt(server, 3, PREFIX)
        first = None
        for i in range(SESSIONS):
            prompt = prefix + " " + text(500 + i, 12)
            n_prompt = len(tokenize(server, prompt))
            status, body = server.post("/completion", {"prompt": prompt, "n_predict": 1, "temperature": 0,
                                                       "session_id": "agent-%d" % i})
            assert status == 200, body
            if i == 0:
                first = metric(server, "memory_bytes")
                # The first session's cells are its prompt (and at most its one generated token).
                assert n_prompt * cell_bytes(kv) <= first <= (n_prompt + 1) * cell_bytes(kv), (first, n_prompt)
            else:
                assert body["timings"]["prompt_n"] <= n_prompt - PREFIX + 1, body["timings"]  # the prefix is attached
        total = metric(server, "memory_bytes")
        # One copy of the prefix: the 15 others add only their questions (< 64 tokens each).
        assert total <= first + (SESSIONS - 1) * 64 * cell_bytes(kv), (total, first)
        RESULTS[kv] = (first, total)
        server.stop()
        assert server.proc.returncode == 0, server.log()
    finally:
        server.stop()


def test_report():
    """The table (after the parametrized cases; run with -s to see it)."""
    if set(RESULTS) != set(TYPES):
        pytest.skip("run with the cases above")
    f16_total = RESULTS["f16"][1]
    print("\n| KV (K/V) | bytes / cell | 1 session | %d sessions | %d copies unshared | vs f16 |" % (SESSIONS, SESSIONS))
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for kv in TYPES:
        first, total = RESULTS[kv]
        print("| %s | %d | %.2f MiB | %.2f MiB | %.2f MiB | %.3f x |" % (
            kv, cell_bytes(kv), first / 2**20, total / 2**20, SESSIONS * first / 2**20, total / f16_total))
    # The compressed pools are the row sizes' fraction of f16's (within the questions' share).
    for kv in TYPES:
        assert RESULTS[kv][1] / f16_total == pytest.approx(cell_bytes(kv) / cell_bytes("f16"), rel=0.02), kv
