"""Sliding-window memory over HTTP (issue 50; docs/memory-semantics.md §10), default flags.

Gemma 3 and gpt-oss keep only each sequence's window of their sliding-window layers; a sequence
resumes where its cached pages hold the window (--swa-cache) or a snapshot is. A 6,000-token prompt,
then one diverging 2,000 tokens before its end: the dense model, --swa-full and the window memory
evaluate exactly from the divergence; with --swa-cache 0, the window memory from the latest
snapshot before it (at most one snapshot spacing earlier); one diverging 20 tokens before
the end evaluates at most 20 + one page. Every output equals a run that used no cache. /slots and
/metrics report the bytes a sequence holds: the full layers' rows of every position plus the
window, a fraction of --swa-full's.
"""

import random

import pytest

from conftest import Server, greedy_completion as complete, metric, model_file

P = 16  # tokens per page (the default)
ROLLBACK = 32  # positions a window memory drops from a sequence's end in place (memory/window_kv.h)


def random_tokens(seed, n):
    rng = random.Random(seed)
    return [rng.randrange(1000, 20000) for _ in range(n)]


def check_same_as_uncached(server, prompt, answer):
    fresh = complete(server, prompt, 4, cache_prompt=False, cache_salt="fresh")
    assert fresh["timings"]["cache_n"] == 0
    assert fresh["tokens"] == answer["tokens"]


@pytest.mark.parametrize("kind,flags", [("dense", []), ("gemma3", []), ("gemma3", ["--swa-full"]),
                                        ("gemma3", ["--swa-cache", "0"]), ("gpt-oss", []), ("gpt-oss", ["--swa-full"]),
                                        ("gpt-oss", ["--swa-cache", "0"])])
def test_prompts_diverging_before_the_end_evaluate_from_the_divergence(tmp_path, kind, flags):
    server = Server(tmp_path, "-np", "1", "-c", "16384", "--metrics", "--batch-invariant", *flags, model=model_file(kind))
    try:
        _, props = server.get("/props")
        spacing = props["memory"]["snapshot_spacing"]
        window_memory = kind != "dense" and "--swa-full" not in flags
        snapshots_only = "--swa-cache" in flags  # no room for the pages' window rows
        assert ("sliding-window layers keep only each sequence's window" in server.log()) == window_memory
        a = random_tokens(1, 6000)
        first = complete(server, a, 4)
        assert first["timings"]["prompt_n"] == len(a)

        # 2,000 tokens before the end.
        b = a[:4000] + random_tokens(2, 2000)
        second = complete(server, b, 4)
        evaluated = second["timings"]["prompt_n"]
        assert second["timings"]["cache_n"] + evaluated == len(b)
        if snapshots_only:
            assert 0 < spacing <= 512 and 2000 <= evaluated <= 2000 + spacing, (evaluated, spacing)
        else:  # the pages hold the window before the divergence (or every row: dense, --swa-full)
            assert evaluated == 2000, evaluated

        # 20 tokens before the end of the last prompt (its answer's 4 tokens were cached too).
        c = b[:-20] + random_tokens(3, 20)
        third = complete(server, c, 4)
        assert third["timings"]["prompt_n"] <= 20 + P, third["timings"]

        # What one sequence holds: the full layers' rows of its positions, and only the window of the others.
        _, slots = server.get("/slots")
        held, window_bytes = slots[0]["kv_bytes"], slots[0]["kv_bytes_window"]
        assert metric(server, "kv_bytes_slot_max") == held
        assert metric(server, "kv_window_bytes") == window_bytes
        if window_memory:
            assert 0 < window_bytes < held
        else:
            assert window_bytes == 0 and held > 0
        # The cached pages' window rows (--swa-cache): what made the resumption exact.
        cached_window = metric(server, "kv_window_cells_cached")
        assert (cached_window > 0) == (window_memory and not snapshots_only), cached_window
        # Each answer as a run that used no cache gives it (last: these runs take the pool's room).
        for prompt, answer in [(a, first), (b, second), (c, third)]:
            check_same_as_uncached(server, prompt, answer)
        server.stop()
        assert server.proc.returncode == 0, server.log()
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["gemma3", "gpt-oss"])
def test_the_window_memory_holds_a_fraction_of_swa_full(tmp_path, kind):
    prompt = random_tokens(4, 3000)
    held = {}
    for name, flags in [("window", []), ("full", ["--swa-full"])]:
        server = Server(tmp_path / name, "-np", "1", "-c", "4096", "--batch-invariant", *flags, model=model_file(kind))
        try:
            answer = complete(server, prompt, 1)
            _, slots = server.get("/slots")
            held[name] = (slots[0]["kv_bytes"], slots[0]["kv_bytes_window"], answer["tokens"])
        finally:
            server.stop()
    (window_total, window_part, window_answer), (full_total, full_part, full_answer) = held["window"], held["full"]
    assert window_answer == full_answer
    assert full_part == 0
    # The main cache holds every position of the full-attention layers in both; --swa-full also
    # every position of the windowed layers, the window memory only their window (+ rollback + a
    # micro-batch at most).
    full_layers = window_total - window_part
    per_layer_position = (full_total - full_layers) / len(prompt)  # the windowed layers' bytes per position
    assert per_layer_position > 0
    window = 16  # both micro presets (model/presets.cpp)
    assert window_part <= per_layer_position * (window + ROLLBACK + 512), (window_part, per_layer_position)
    assert window_total < 0.6 * full_total, (window_total, full_total)
