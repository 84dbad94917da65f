"""Retrieval heads through the server (issue 18): `--kv-hot N --kv-retrieval-heads F` keeps a window
of N cells for every head and, older than it, only the rows of the KV heads the start-up probe
finds retrieving (DuoAttention's split; docs/memory-semantics.md §9).

On the trained model (its copying circuit is one KV head of eight): pass-key prompts of ~1,000
tokens whose needle lies far outside a 256-cell window are answered as with the whole cache when
the tail keeps that one head (1/8 of the tail's bytes), and not at all when it keeps none. The
start-up log and /props name the kept head; saving a slot whose old cells lack the other heads'
rows is refused with the reason, and the server goes on serving.
"""

import os
import subprocess

from conftest import REPO, Server, _find_binary
from test_shared_prefix import metric

MODEL = os.path.join(REPO, "trained", "agentkv-tiny", "model.gguf")
HELDOUT = os.path.join(REPO, "trained", "agentkv-tiny", "heldout.txt")
HOT = 256
QUESTION = "\nWhat is the pass key? The pass key is"  # tools/quality_passkey.h


def passkey_prompt(key, first_line):
    with open(HELDOUT, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    filler = "".join(lines[first_line:first_line + 160])[:4000]
    cut = len(filler) // 10
    needle = "The pass key is %d. Remember it. %d is the pass key.\n" % (key, key)
    return filler[:cut] + needle + filler[cut:] + QUESTION


def answers(server, cases):
    out = []
    for key, line in cases:
        status, body = server.post("/completion", {"prompt": passkey_prompt(key, line), "n_predict": 8,
                                                   "temperature": 0, "cache_prompt": False})
        assert status == 200, body
        assert body["tokens_evaluated"] > 3 * HOT
        out.append(body["content"])
    return out


def start(tmp_path, name, *extra):
    # Micro-batches well below the window: a batch's rows are written hot, so the first tokens of a
    # batch as large as the window would see only the batch's own rows through the other heads.
    return Server(tmp_path / name, "-np", "1", "-c", "2048", "-ub", "32", "--metrics", "--kv-hot", str(HOT), *extra,
                  model=MODEL)


CASES = [(31337, 40), (52817, 400), (70411, 900)]


def test_keeping_the_retrieval_head_keeps_the_pass_key_beyond_the_window(tmp_path):
    exact = start(tmp_path, "exact")
    try:
        expected = answers(exact, CASES)
        full_tail_bytes = metric(exact, "kv_tail_bytes")
    finally:
        exact.stop()
    assert all(a.strip().startswith(str(k)) for a, (k, _) in zip(expected, CASES)), expected

    saves = tmp_path / "saves"
    saves.mkdir()
    server = start(tmp_path, "retrieval", "--kv-retrieval-heads", "0.125", "--slot-save-path", str(saves))
    try:
        got = answers(server, CASES)
        assert all(a.strip().startswith(str(k)) for a, (k, _) in zip(got, CASES)), got
        assert metric(server, "kv_tail_bytes") * 8 == full_tail_bytes
        assert "KV retrieval heads: the tail keeps the rows of 1 of 8 KV heads (1.0, by the retrieval probe)" in server.log()
        status, props = server.get("/props")
        assert status == 200
        kv = props["kv_cache"]
        assert (kv["hot_cells"], kv["tail_heads_kept"], kv["tail_heads_total"], kv["tail_heads"]) == (HOT, 1, 8, "1.0")
        # The slot's old cells lack seven heads' rows: a state file of them would be wrong, so none is written.
        status, body = server.post("/slots/0?action=save", {"filename": "slot0.bin"})
        assert status == 400 and "retrieval heads" in body["error"]["message"], (status, body)
        assert not os.listdir(str(saves))
        assert answers(server, CASES[:1]) == got[:1]
    finally:
        server.stop()

    streaming = start(tmp_path, "streaming", "--kv-retrieval-heads", "0")
    try:
        lost = answers(streaming, CASES)
        assert not any(a.strip().startswith(str(k)) for a, (k, _) in zip(lost, CASES)), lost
    finally:
        streaming.stop()


def test_retrieval_heads_need_a_window():
    proc = subprocess.run([_find_binary(), "serve", "-m", MODEL, "--kv-retrieval-heads", "0.5"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    assert "--kv-retrieval-heads needs --kv-hot" in proc.stderr + proc.stdout
