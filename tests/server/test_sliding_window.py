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

import os
import random

import pytest

from conftest import Server, greedy_completion as complete, metric, model_file, wait_for

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


def damage_window_records(folder):
    """Flips a byte in the middle of every window record (magic "AKVW"); returns how many."""
    n = 0
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        with open(path, "r+b") as f:
            if f.read(4) != b"AKVW":
                continue
            f.seek(os.path.getsize(path) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x10]))
            n += 1
    return n


@pytest.mark.parametrize("damaged", [False, True])
@pytest.mark.parametrize("kind", ["gemma3", "gpt-oss"])
def test_a_restarted_server_resumes_at_the_divergence_from_the_disk_tier(tmp_path, kind, damaged):
    """kill -9 and a restart on the same --cache-dir: the pages' window rows went to the disk tier
    beside the pages (window records), so a prompt diverging 2,000 tokens before the end of the
    cached one evaluates exactly those 2,000, as on the running server. Damaged window records are
    refused (logged, dropped): the prompt then resumes at the snapshot before the divergence, and
    the answer is the same."""
    folder = str(tmp_path / "pages")
    flags = ("-np", "1", "-c", "16384", "--metrics", "--batch-invariant", "--cache-dir", folder)
    a = Server(tmp_path / "a", *flags, model=model_file(kind))
    prompt = random_tokens(5, 6000)
    try:
        complete(a, prompt, 4)
        assert wait_for(lambda: metric(a, "disk_tier_writes_pending") == 0), a.log()
    finally:
        a.proc.kill()  # no shutdown, no flush
        a.proc.wait()
        a.stop()
    if damaged:
        assert damage_window_records(folder) > 0
    b = Server(tmp_path / "b", *flags, model=model_file(kind))
    try:
        _, props = b.get("/props")
        diverging = prompt[:4000] + random_tokens(6, 2000)
        second = complete(b, diverging, 4)
        evaluated = second["timings"]["prompt_n"]
        if damaged:
            assert "is damaged: dropped" in b.log(), b.log()
            assert 2000 < evaluated <= 2000 + props["memory"]["snapshot_spacing"], (second["timings"], b.log())
        else:
            assert evaluated == 2000, (second["timings"], b.log())
            assert "fetched the window rows of" in b.log()
        check_same_as_uncached(b, diverging, second)
    finally:
        b.stop()
