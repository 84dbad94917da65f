"""--cache-ram: room for cached pages beyond the context. The memory's prefix index keeps every
finished conversation's pages until their cells are needed; --cache-ram MiB adds that many bytes of
KV cells that only cached pages compete for, so a conversation pushed out of a full context by
another one comes back without being evaluated again. Without it, the same sequence of requests
re-evaluates the first conversation."""

import re

import pytest

from conftest import Server

GREEDY = {"temperature": 0, "repeat_penalty": 2.0, "repeat_last_n": 64, "return_tokens": True}


@pytest.fixture(scope="module")
def ram(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("ram"), "-np", "1", "-c", "640", "--cache-ram", "16", "--metrics")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def no_ram(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("noram"), "-np", "1", "-c", "640", "--metrics")
    yield s
    s.stop()


def complete(server, prompt, n_predict, **extra):
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": n_predict, **GREEDY, **extra})
    assert status == 200, body
    return body


def metric(server, name):
    _, text = server.get("/metrics")
    return float(re.search(r"^llamacpp:%s (\S+)$" % name, text, re.M).group(1))


def conversation_comes_back(server, reference):
    a, extra = reference[5]["prompt_tokens"], reference[3]["prompt_tokens"]
    other = list(range(1000, 1300))  # 300 tokens: a and other do not fit in 640 cells together
    first = complete(server, a, 4)
    assert complete(server, other, 4)["timings"]["cache_n"] == 0
    back = complete(server, a + first["tokens"] + extra, 4)
    assert back["tokens"] == complete(server, a + first["tokens"] + extra, 4, cache_prompt=False)["tokens"]
    return a, extra, back


def test_a_conversation_comes_back_from_the_cache_room(ram, reference):
    a, extra, back = conversation_comes_back(ram, reference)
    assert back["timings"]["cache_n"] == len(a) + 3  # prompt + answer (its last token never evaluated)
    assert back["timings"]["prompt_n"] == 1 + len(extra)
    m = re.search(r"n_ctx 640 shared by 1 slots \(\+ (\d+) cells for cached pages\)", ram.log())
    assert m and int(m.group(1)) >= len(a) + 4, ram.log()
    assert metric(ram, "memory_bytes") > 0
    assert 0 < metric(ram, "prompt_cache_hit_rate") < 1


def test_without_cache_room_the_conversation_is_evaluated_again(no_ram, reference):
    a, extra, back = conversation_comes_back(no_ram, reference)
    assert back["timings"]["cache_n"] < len(a)  # its pages made room for the other prompt
    assert "(+ 0 cells for cached pages)" in no_ram.log()
