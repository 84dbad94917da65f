"""The warm page tier (--cache-warm, docs/memory-semantics.md "Page tiers"): every page record is
also kept compressed in RAM, so a conversation whose pages the KV pool gave up to other prompts
comes back in a decompression, not a prefill, with the output of an all-hot run; the tier stays
within its bound; hybrid models bring their recurrent snapshot back the same way."""

import os

import pytest

from conftest import FIXTURES, MODEL, Server, greedy_completion as complete, metric, wait_for

P = 16  # tokens per page


def stored(server):
    return metric(server, "warm_tier_stores_pending") == 0


def displaced_conversation(server, warm=True):
    """Turn 1 of A (18 pages), then B, whose prompt takes the whole pool, then A's turn 2."""
    a1 = list(range(200, 200 + 18 * P))
    first = complete(server, a1, 8)
    assert not warm or wait_for(lambda: stored(server))
    b = list(range(3000, 3000 + 480))
    complete(server, b, 8)
    a2 = a1 + first["tokens"] + [31, 32, 33]
    return first, complete(server, a2, 8), a2


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_pages_the_pool_gave_up_come_back_from_the_warm_tier(tmp_path, kind):
    model = MODEL if kind == "dense" else os.path.join(FIXTURES, "models", "qwen35moe-micro.gguf")
    args = ("-np", "1", "-c", "512", "--metrics")
    cold = Server(tmp_path / "cold", *args, model=model)
    try:  # without the tier: B's prompt pushed A's pages out, A's turn 2 is a prefill
        _, cold_turn2, a2 = displaced_conversation(cold, warm=False)
        assert cold_turn2["timings"]["cache_n"] < P, cold_turn2["timings"]
    finally:
        cold.stop()

    warm = Server(tmp_path / "warm", *args, "--cache-warm", "64", model=model)
    try:
        assert "warm page tier: up to 64 MiB" in warm.log()
        first, turn2, _ = displaced_conversation(warm)
        held = 18 * P + 8 - 1  # A's prompt and answer, as turn 1 left them
        assert turn2["timings"]["cache_n"] == held, (turn2["timings"], warm.log())
        assert turn2["timings"]["prompt_n"] == len(a2) - held
        assert "fetched %d pages (K/V through position %d)" % (held // P + 1, held) in warm.log()
        if kind == "hybrid":
            assert "fetched the state snapshot at position %d" % held in warm.log()
        assert turn2["tokens"] == cold_turn2["tokens"] and turn2["content"] == cold_turn2["content"]
        assert metric(warm, "warm_tier_hits_total") >= held // P
        assert metric(warm, "warm_tier_loaded_bytes_total") > 0
        assert 0 < metric(warm, "warm_tier_bytes") <= metric(warm, "warm_tier_record_bytes")
    finally:
        warm.stop()


def test_a_requantizing_warm_tier_gives_pages_back_smaller(tmp_path):
    s = Server(tmp_path / "s", "-np", "1", "-c", "512", "--metrics", "--cache-warm", "64", "--cache-warm-type", "q8_0")
    try:
        assert "warm page tier: up to 64 MiB of page records in RAM, q8_0 (requantized K/V rows)" in s.log()
        _, turn2, a2 = displaced_conversation(s)
        held = 18 * P + 8 - 1
        assert turn2["timings"]["cache_n"] == held, (turn2["timings"], s.log())
        assert turn2["timings"]["prompt_n"] == len(a2) - held
        # q8_0 rows: 34 bytes per 32 values against f16's 64 (a record's header and tokens aside).
        assert metric(s, "warm_tier_bytes") < 0.56 * metric(s, "warm_tier_record_bytes")
    finally:
        s.stop()


def test_the_warm_tier_stays_within_its_bound(tmp_path):
    s = Server(tmp_path / "s", "-np", "1", "--cache-warm", "1", "--metrics")
    try:
        for i in range(14):  # distinct prompts of 24 pages each: 336 records of ~4,200 bytes > 1 MiB
            complete(s, list(range(100 + 400 * i, 100 + 400 * i + 390)), 1)
        assert wait_for(lambda: stored(s))
        assert 0 < metric(s, "warm_tier_bytes") <= 1 << 20
        assert metric(s, "warm_tier_pages_evicted_total") > 0
        # The newest prompt is still there; the first is gone from RAM and is computed again.
        assert complete(s, list(range(100 + 400 * 13, 100 + 400 * 13 + 390)), 1)["timings"]["cache_n"] >= 384
    finally:
        s.stop()
