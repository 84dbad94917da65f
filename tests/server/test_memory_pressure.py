"""Slots share one memory of n_ctx cells: what happens when it runs out."""

import threading

import pytest

from conftest import Server


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("small"), "-np", "2", "-c", "256")
    yield s
    s.stop()


def tokens(reference, case, n):
    base = reference[case]["prompt_tokens"]
    return (base * (n // len(base) + 1))[:n]


def complete(server, prompt, n_predict, **extra):
    return server.post("/completion", {"prompt": prompt, "n_predict": n_predict, "temperature": 0,
                                       "return_tokens": True, **extra})


def test_idle_caches_make_room(small, reference):
    a, b = tokens(reference, 5, 150), tokens(reference, 1, 150)
    assert complete(small, a, 2, session_id="a")[0] == 200
    status, body = complete(small, b, 2, session_id="b")
    assert status == 200 and body["timings"]["cache_n"] == 0
    assert "dropping this idle slot's cache" in small.log()
    status, again = complete(small, a, 2, session_id="a")
    assert status == 200 and again["timings"]["cache_n"] == 0  # a's cache was the one dropped


def test_a_prompt_that_does_not_fit_waits_for_the_others(small, reference):
    a, b = tokens(reference, 2, 150), tokens(reference, 3, 150)
    alone_b = complete(small, b, 4, cache_prompt=False)[1]["tokens"]
    results = {}

    def run(name, prompt, n):
        results[name] = complete(small, prompt, n, cache_prompt=False)

    first = threading.Thread(target=run, args=("a", a, 40))
    first.start()
    small.post("/tokenize", {"content": "let the first request start"})
    second = threading.Thread(target=run, args=("b", b, 4))
    second.start()
    first.join(60)
    second.join(60)
    assert results["a"][0] == 200 and results["a"][1]["tokens_predicted"] == 40
    assert results["b"][0] == 200 and results["b"][1]["tokens"] == alone_b
    assert "goes back to the queue" in small.log()
    small.wait_all_idle()


def test_generation_stops_when_the_context_is_full(small, reference):
    prompt = tokens(reference, 4, 200)
    status, body = complete(small, prompt, 100, cache_prompt=False)
    assert status == 200
    assert body["truncated"] is True and body["stop_type"] == "limit"
    assert body["tokens_predicted"] == 256 - 200  # llama-server's rule: stop once n_past + 1 >= n_ctx
