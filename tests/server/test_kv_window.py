"""Windowed KV residency through the server (issue 17): `--kv-hot N` keeps at most N cells' rows
hot and moves older positions to the tail (`--kv-tail-type`, default the hot type), which
attention reads as well.

A three-turn conversation of ~3,000 tokens on a 1,024-cell hot window: with an exact (f16) tail,
kept in files mapped from `--kv-tail-dir`, every answer is the text of a server without the
window, and /metrics shows the rows that moved;
with a q8_0 tail the tail's bytes are the q8_0 row size and the conversation completes. Dense and
hybrid. A window smaller than a micro-batch is refused at start with the reason.
"""

import os

import pytest

from conftest import FIXTURES, Server
from test_shared_prefix import chat, metric, system_prompt, text

MODELS = {"dense": "qwen3-micro.gguf", "hybrid": "qwen35moe-micro.gguf"}
HOT = 1024


def conversation(server):
    """Three turns on one session; returns the answers and the last turn's prompt size."""
    messages = [{"role": "system", "content": system_prompt(server, 11, 2500)}]
    answers = []
    for turn in range(3):
        messages.append({"role": "user", "content": text(100 + turn, 60)})
        body = chat(server, messages, 24, session_id="agent")
        answer = body["choices"][0]["message"]["content"]
        answers.append(answer)
        messages.append({"role": "assistant", "content": answer})
    return answers, body["usage"]["prompt_tokens"]


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_an_exact_tail_gives_the_answers_of_an_all_hot_cache(kind, tmp_path):
    model = os.path.join(FIXTURES, "models", MODELS[kind])
    plain = Server(tmp_path / "plain", "-np", "1", "-c", "4096", "--metrics", model=model)
    try:
        expected, _ = conversation(plain)
    finally:
        plain.stop()
    tail_dir = tmp_path / "tail"
    tail_dir.mkdir()
    windowed = Server(tmp_path / "windowed", "-np", "1", "-c", "4096", "--metrics", "--kv-hot", str(HOT),
                      "--kv-tail-dir", str(tail_dir), model=model)
    try:
        answers, n_prompt = conversation(windowed)
        assert answers == expected
        assert not os.listdir(str(tail_dir))  # the mapped tail files were unlinked at once
        assert n_prompt > 2 * HOT
        assert metric(windowed, "kv_hot_cells_used") <= HOT
        assert metric(windowed, "kv_tail_cells_used") >= n_prompt - HOT
        assert metric(windowed, "kv_demotions_total") >= n_prompt - HOT
        status, slots = windowed.get("/slots")
        assert status == 200
        assert slots[0]["n_tokens_hot"] <= HOT and slots[0]["n_tokens_tail"] >= n_prompt - HOT
        assert "KV window: %d hot cells, the rest in a f16/f16 tail in files mapped from" % HOT in windowed.log()
    finally:
        windowed.stop()


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_q8_tail_holds_the_old_positions_compressed(kind, tmp_path):
    model = os.path.join(FIXTURES, "models", MODELS[kind])
    server = Server(tmp_path, "-np", "1", "-c", "4096", "--metrics", "--kv-hot", str(HOT), "--kv-tail-type", "q8_0",
                    model=model)
    try:
        answers, n_prompt = conversation(server)
        assert all(isinstance(a, str) for a in answers)
        assert metric(server, "kv_tail_cells_used") >= n_prompt - HOT
        q8_bytes = metric(server, "kv_tail_bytes")
        server.stop()
        assert server.proc.returncode == 0, server.log()
    finally:
        server.stop()
    # The tail reserves every cell's rows at the tail type's size: q8_0 blocks of 32 are 34 bytes, f16's 64.
    f16_tail = Server(tmp_path / "f16", "-np", "1", "-c", "4096", "--metrics", "--kv-hot", str(HOT), model=model)
    try:
        assert q8_bytes * 64 == metric(f16_tail, "kv_tail_bytes") * 34
    finally:
        f16_tail.stop()


def test_a_window_smaller_than_a_micro_batch_is_refused(tmp_path):
    log = os.path.join(str(tmp_path), "server.log")
    with pytest.raises(Exception):
        Server(tmp_path, "-c", "4096", "--kv-hot", "100")
    with open(log, "rb") as f:
        assert b"must be at least n_ubatch" in f.read()


def test_a_context_shift_turns_keys_in_the_tail_too(tmp_path):
    # 700 tokens through a 512-cell context with a 256-cell window: every shift re-rotates keys in
    # the window and in the tail (through the tail's type). An exact tail gives the window-less tokens.
    request = {"prompt": "hello world " * 20, "n_predict": 700, "temperature": 0, "ignore_eos": True,
               "return_tokens": True}
    runs = {}
    for name, extra in [("plain", []), ("exact", ["--kv-hot", "256", "-ub", "256"]),
                        ("q8_0", ["--kv-hot", "256", "-ub", "256", "--kv-tail-type", "q8_0"])]:
        server = Server(tmp_path / name, "-np", "1", "-c", "512", "--context-shift", *extra)
        try:
            status, body = server.post("/completion", request)
            assert status == 200, body
            assert body["tokens_predicted"] == 700
            runs[name] = body["tokens"]
        finally:
            server.stop()
    assert runs["exact"] == runs["plain"]
