"""Fake-prefix timing mode: `n_fake_cached: L` gives the slot a metadata-only prefix of L positions
(zero keys, no computation), so the cost of a turn at depth L is measured without evaluating L
tokens: only the prompt tokens after the first L are evaluated."""

import pytest

from conftest import Server


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("deep"), "-np", "2", "-c", "16384")
    yield s
    s.stop()


@pytest.mark.parametrize("n_fake", [1024, 8192])
def test_only_the_tokens_after_the_fake_prefix_are_evaluated(deep, n_fake):
    tail = [785, 3974, 13876, 750, 75698, 1445, 982, 262]
    # A filler token of its own per case: the first case's check request leaves real pages of it.
    prompt = [16 + (n_fake == 8192)] * n_fake + tail
    status, body = deep.post("/completion", {"prompt": prompt, "n_predict": 3, "temperature": 0,
                                             "n_fake_cached": n_fake})
    assert status == 200, body
    assert body["timings"]["cache_n"] == n_fake
    assert body["timings"]["prompt_n"] == len(tail)
    assert body["tokens_predicted"] == 3
    # The fake prefix is no cache: the slot forgets it.
    slot = body["id_slot"]
    _, slots = deep.get("/slots")
    assert slots[slot]["n_tokens_cached"] == 0
    status, again = deep.post("/completion", {"prompt": prompt[:64], "n_predict": 1, "id_slot": slot})
    assert status == 200 and again["timings"]["cache_n"] == 0


def assert_400(response, part):
    status, body = response
    assert status == 400, body
    assert part in body["error"]["message"], body


def test_refused_requests(deep):
    prompt = [16] * 32
    assert_400(deep.post("/completion", {"prompt": prompt, "n_fake_cached": 32}), "below the prompt length")
    assert_400(deep.post("/completion", {"prompt": prompt, "n_fake_cached": 40}), "below the prompt length")
    assert_400(deep.post("/completion", {"prompt": prompt, "n_fake_cached": 8, "cache_prompt": True}),
               "cache_prompt")
    assert_400(deep.post("/completion", {"prompt": prompt, "n_fake_cached": -1}), "n_fake_cached")
    status, body = deep.post("/completion", {"prompt": prompt, "n_fake_cached": 8, "cache_prompt": False,
                                             "n_predict": 1})
    assert status == 200 and body["timings"]["cache_n"] == 8
