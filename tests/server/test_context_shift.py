"""--context-shift (llama-server's flag): a generation that reaches the context drops the middle of its
sequence (n_keep tokens kept at the front, n_discard after them, default half of the rest) and goes
on; without the flag it ends "truncated". After the task only the front the shift kept stays cached
(the shifted keys are not what a prefill of those tokens computes), so a later prompt reuses that
front exactly.
"""

import os

import pytest

from conftest import FIXTURES, GREEDY, Server, greedy_completion, metric

HYBRID = os.path.join(FIXTURES, "models", "qwen35moe-micro.gguf")
PROMPT = "The history of the city begins with a small harbour, a market and a road to the hills, " * 2
N_CTX = 256


def test_generation_goes_past_the_context_and_keeps_an_exact_front(tmp_path):
    plain = Server(tmp_path / "plain", "-np", "1", "-c", str(N_CTX))
    try:
        limited = greedy_completion(plain, PROMPT, n_predict=400)
        n_prompt = limited["timings"]["prompt_n"]
        assert limited["truncated"] and limited["timings"]["predicted_n"] < N_CTX - n_prompt + 1
        cold = greedy_completion(plain, PROMPT, n_predict=6, cache_prompt=False)
    finally:
        plain.stop()

    s = Server(tmp_path / "shift", "-np", "1", "-c", str(N_CTX), "--context-shift", "--metrics")
    try:
        shifted = greedy_completion(s, PROMPT, n_predict=400, n_keep=-1)
        assert shifted["timings"]["predicted_n"] == 400 and shifted["truncated"] is True
        assert shifted["stop_type"] == "limit"
        assert metric(s, "context_shifts_total") >= 2
        # Up to the first shift the generation is the unshifted one.
        before = len(limited["tokens"])
        assert shifted["tokens"][:before - 1] == limited["tokens"][:before - 1]
        assert "context shift (positional): n_keep %d" % n_prompt in s.log()

        # The kept front (the whole prompt, n_keep = -1) is reused, and it is exact.
        again = greedy_completion(s, PROMPT, n_predict=6)
        assert again["timings"]["cache_n"] == n_prompt - 1, again["timings"]
        assert again["tokens"] == cold["tokens"]

        # n_discard chooses how much goes: more shifts for smaller cuts.
        shifts = metric(s, "context_shifts_total")
        greedy_completion(s, PROMPT, n_predict=300, n_keep=-1, n_discard=8)
        assert metric(s, "context_shifts_total") - shifts > 5

        for bad in ({"n_keep": -2}, {"n_discard": -1}, {"n_keep": "all"}):
            status, err = s.post("/completion", {"prompt": PROMPT, "n_predict": 4, **GREEDY, **bad})
            assert status == 400, (bad, err)
    finally:
        s.stop()


@pytest.mark.parametrize("policy", ["sinks", "keydiff", "snapkv"])
def test_every_eviction_policy_keeps_generating_and_an_exact_front(tmp_path, policy):
    """--kv-evict (and the request's kv_evict): which positions a shift drops. The scoring policies
    drop scattered positions after n_keep and before the newest 32; sinks keeps only 4 at the front."""
    s = Server(tmp_path, "-np", "1", "-c", str(N_CTX), "--context-shift", "--kv-evict", policy, "--metrics")
    try:
        cold = greedy_completion(s, PROMPT, n_predict=6, cache_prompt=False)
        n_prompt = cold["timings"]["prompt_n"]
        shifted = greedy_completion(s, PROMPT, n_predict=400, n_keep=-1)
        assert shifted["timings"]["predicted_n"] == 400 and shifted["truncated"] is True
        assert metric(s, "context_shifts_total") >= 2
        assert metric(s, "evicted_tokens_%s_total" % policy) > 0
        assert metric(s, "evicted_tokens_positional_total") == 0
        assert "context shift (%s" % policy in s.log()
        assert "no recorded queries" not in s.log()  # snapkv had its observation window
        _, slots = s.get("/slots")
        assert slots[0]["n_context_shifts"] >= 2 and slots[0]["n_tokens_evicted"] == metric(s, "evicted_tokens_%s_total" % policy)
        again = greedy_completion(s, PROMPT, n_predict=6)
        if policy != "sinks":  # n_keep = -1 keeps the prompt whole: it is reused, exactly
            assert again["timings"]["cache_n"] == n_prompt - 1, again["timings"]
        assert again["tokens"] == cold["tokens"]
        # A request may choose another policy; an unknown one is refused.
        greedy_completion(s, PROMPT, n_predict=300, n_keep=-1, kv_evict="positional")
        assert metric(s, "evicted_tokens_positional_total") > 0
        status, err = s.post("/completion", {"prompt": PROMPT, "n_predict": 4, "kv_evict": "random", **GREEDY})
        assert status == 400 and "kv_evict" in err["error"]["message"], err
    finally:
        s.stop()


def test_a_kv_budget_shifts_before_the_context_is_full(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", str(N_CTX), "--context-shift", "--kv-budget", "128", "--kv-evict", "keydiff",
               "--metrics")
    try:
        r = greedy_completion(s, PROMPT, n_predict=150, n_keep=-1)
        # The prompt and 150 tokens fit in 256 positions: only the budget makes it shift.
        assert r["timings"]["prompt_n"] + 150 < N_CTX
        assert r["timings"]["predicted_n"] == 150 and metric(s, "context_shifts_total") >= 2
        assert "drops part of its sequence" in s.log() and "128 positions" in s.log()
    finally:
        s.stop()


def test_several_slots_shift_when_the_shared_pool_is_full(tmp_path):
    # The pool is -c for all slots: two long generations fill it together; each shifts and goes on.
    s = Server(tmp_path, "-np", "2", "-c", str(N_CTX), "--context-shift", "--metrics")
    try:
        import threading
        results = [None, None]

        def run(i):
            results[i] = greedy_completion(s, PROMPT + str(i), n_predict=200, n_keep=8)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        for r in results:
            assert r is not None and r["timings"]["predicted_n"] == 200 and r["truncated"] is True
        assert metric(s, "context_shifts_total") >= 2
    finally:
        s.stop()


def test_hybrid_model_cannot_shift(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", str(N_CTX), "--context-shift", model=HYBRID)
    try:
        assert "cannot shift" in s.log() and "disabled" in s.log()
        body = greedy_completion(s, PROMPT, n_predict=400)
        assert body["truncated"] and body["timings"]["predicted_n"] < N_CTX
    finally:
        s.stop()


@pytest.mark.parametrize("kind", ["gemma3", "gpt-oss"])
def test_a_sliding_window_model_shifts_both_of_its_caches(tmp_path, kind):
    """Gemma 3 and gpt-oss keep only their windowed layers' window (docs/memory-semantics.md §10):
    a shift moves (and re-rotates) the full layers' cache and the window part together, as
    llama.cpp's sliding-window cache does. Up to the first shift the generation is the unshifted
    one; after it, it goes on to the limit."""
    from conftest import model_file
    model = model_file(kind)
    plain = Server(tmp_path / "plain", "-np", "1", "-c", str(N_CTX), model=model)
    try:
        limited = greedy_completion(plain, PROMPT, n_predict=400)
        assert limited["truncated"]
    finally:
        plain.stop()
    s = Server(tmp_path / "shift", "-np", "1", "-c", str(N_CTX), "--context-shift", "--metrics", model=model)
    try:
        shifted = greedy_completion(s, PROMPT, n_predict=400, n_keep=-1)
        assert shifted["timings"]["predicted_n"] == 400 and shifted["stop_type"] == "limit"
        assert metric(s, "context_shifts_total") >= 2
        before = len(limited["tokens"])
        assert shifted["tokens"][:before - 1] == limited["tokens"][:before - 1]
        # The kept front cannot stay: the window before its end is gone (dropping the shifted tokens
        # is refused), so the slot lets its sequence go; the next request is served exactly.
        again = greedy_completion(s, PROMPT, n_predict=6)
        cold = greedy_completion(s, PROMPT, n_predict=6, cache_prompt=False, cache_salt="cold")
        assert again["tokens"] == cold["tokens"]
    finally:
        s.stop()
    assert s.proc.returncode == 0, s.log()
