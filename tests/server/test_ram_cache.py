"""--cache-ram: a slot's state is kept in host RAM when the slot moves on to another prompt (or
memory pressure drops it) and is restored when its prefix comes back."""

import re

import pytest

from conftest import Server

GREEDY = {"temperature": 0, "repeat_penalty": 2.0, "repeat_last_n": 64, "return_tokens": True}


@pytest.fixture(scope="module")
def ram(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("ram"), "-np", "1", "-c", "2048", "--cache-ram", "64", "--metrics")
    yield s
    s.stop()


def complete(server, prompt, n_predict, **extra):
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": n_predict, **GREEDY, **extra})
    assert status == 200, body
    return body


def metric(server, name):
    _, text = server.get("/metrics")
    return float(re.search(r"^llamacpp:%s (\S+)$" % name, text, re.M).group(1))


def test_a_conversation_comes_back_from_ram(ram, reference):
    a, b, extra = reference[5]["prompt_tokens"], reference[4]["prompt_tokens"], reference[3]["prompt_tokens"]
    first = complete(ram, a, 4)
    other = complete(ram, b, 4)  # one slot: a's state goes to RAM
    assert other["timings"]["cache_n"] == 0
    assert metric(ram, "ram_cache_entries") == 1 and metric(ram, "ram_cache_bytes") > 0
    back = complete(ram, a + first["tokens"] + extra, 4)
    assert back["timings"]["cache_n"] == len(a) + 3  # prompt + answer (its last token never evaluated)
    assert back["timings"]["prompt_n"] == 1 + len(extra)
    assert metric(ram, "ram_cache_hits_total") == 1
    assert "restored a state of" in ram.log()
    assert back["tokens"] == complete(ram, a + first["tokens"] + extra, 4, cache_prompt=False)["tokens"]
    # b went to RAM in turn; the entry for a was replaced by its longer state.
    assert metric(ram, "ram_cache_entries") >= 1
    assert metric(ram, "memory_bytes") > 0
    assert 0 < metric(ram, "prompt_cache_hit_rate") < 1
