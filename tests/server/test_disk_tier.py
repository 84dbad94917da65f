"""The disk page tier (--cache-dir, docs/memory-semantics.md "Page tiers"): full KV pages are
written to a folder as they fill, each turn's partial last page at its end, and for hybrid models
the recurrent snapshots, so a server killed with SIGKILL and started again on the same folder
evaluates only what no run computed, with the output of a fresh full prefill. A damaged or
foreign record is never attached: it is dropped, logged, its tokens computed and stored again."""

import os
import struct

import pytest

from conftest import FIXTURES, HYBRID_MODELS, MEMORY_MODELS, SNAPSHOT_MODELS, MODEL, Server, greedy_completion as complete, metric, model_file, wait_for

P = 16  # tokens per page (the scheduler's page size)


def records(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".page"))


def full_page_records(folder):
    """The records of full pages (a page record's header: magic, version, hash, first_pos, n_tokens)."""
    out = []
    for name in records(folder):
        with open(os.path.join(folder, name), "rb") as f:
            head = f.read(24)
        if head[:4] == b"AKVP" and struct.unpack("<I", head[20:24])[0] == P:
            out.append(name)
    return out


def written(server):
    return metric(server, "disk_tier_writes_pending") == 0


def three_turns(server, reference):
    turn1 = reference[5]["prompt_tokens"]
    first = complete(server, turn1, 8)
    turn2 = turn1 + first["tokens"] + reference[3]["prompt_tokens"]
    second = complete(server, turn2, 8)
    turn3 = turn2 + second["tokens"] + reference[1]["prompt_tokens"]
    third = complete(server, turn3, 8)
    assert third["timings"]["cache_n"] >= len(turn2)  # the running server reuses as before
    # Turn 4, and where each turn left the cache (its evaluated tokens).
    return turn3 + third["tokens"] + [21, 22], [len(t) + 8 - 1 for t in (turn1, turn2, turn3)]


@pytest.mark.parametrize("kind", MEMORY_MODELS)
def test_a_server_killed_and_restarted_evaluates_only_the_new_tokens(tmp_path, reference, kind):
    model = model_file(kind)
    folder = str(tmp_path / "pages")
    a = Server(tmp_path / "a", "-np", "1", "--cache-dir", folder, "--metrics", model=model)
    try:
        turn4, ends = three_turns(a, reference)
        held = ends[-1]
        assert wait_for(lambda: written(a)), a.log()
        assert len(full_page_records(folder)) == held // P, (records(folder), held)
        if kind not in SNAPSHOT_MODELS:  # the full pages and each turn's tail; snapshots add themselves and mid-prompt tails
            assert len(records(folder)) == held // P + sum(1 for e in ends if e % P), (records(folder), ends)
        assert not [f for f in os.listdir(folder) if not f.endswith(".page")]  # no unfinished writes
        n_records = len(records(folder))
    finally:
        a.proc.kill()  # kill -9: no shutdown, no flush
        a.proc.wait()
        a.stop()

    b = Server(tmp_path / "b", "-np", "1", "--cache-dir", folder, "--metrics", model=model)
    try:
        assert "page tier on disk: %s (%d page records" % (folder, n_records) in b.log()
        assert metric(b, "disk_tier_pages_found_at_start") == n_records
        fourth = complete(b, turn4, 8)
        assert fourth["timings"]["cache_n"] == held, (fourth["timings"], b.log())
        assert fourth["timings"]["prompt_n"] == len(turn4) - held
        assert "fetched %d pages (K/V through position %d)" % (held // P + (held % P > 0), held) in b.log()
        assert metric(b, "disk_tier_pages_read_total") >= held // P
        assert metric(b, "disk_tier_loaded_bytes_total") > 0 and metric(b, "disk_tier_load_seconds_total") > 0
        if kind in HYBRID_MODELS:
            assert "fetched the state snapshot at position %d" % held in b.log()
        elif kind in SNAPSHOT_MODELS:  # a sliding-window model: its pages' window rows came with them
            assert "fetched the window rows of" in b.log(), b.log()
        fresh = complete(b, turn4, 8, cache_prompt=False, cache_salt="fresh")
        assert fourth["tokens"] == fresh["tokens"] and fourth["content"] == fresh["content"]
        # A salted prompt finds nothing on disk either.
        assert complete(b, turn4, 2, cache_salt="tenant-x")["timings"]["cache_n"] == 0
    finally:
        b.stop()
    assert b.proc.returncode == 0, b.log()


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_an_8k_conversation_killed_after_turn_3_resumes_with_only_its_new_tokens(tmp_path, kind):
    # The size: three turns reaching ~8,000 tokens, kill -9, restart on the folder.
    from test_shared_prefix import system_prompt, text, tokenize
    model = MODEL if kind == "dense" else os.path.join(FIXTURES, "models", "qwen35moe-micro.gguf")
    folder = str(tmp_path / "pages")
    a = Server(tmp_path / "a", "-np", "1", "-c", "9216", "--cache-dir", folder, "--metrics", model=model)
    try:
        turn = tokenize(a, system_prompt(a, 21, 7700))
        for i in range(3):
            turn = turn + tokenize(a, " " + text(300 + i, 120))
            body = complete(a, turn, 8)
            if i > 0:
                assert body["timings"]["cache_n"] >= held
            turn = turn + body["tokens"]
            held = len(turn) - 1  # the last generated token is not evaluated
        assert len(turn) >= 8000
        turn4 = turn + tokenize(a, " " + text(400, 20))
        assert wait_for(lambda: written(a), timeout=60), a.log()
    finally:
        a.proc.kill()  # kill -9
        a.proc.wait()
        a.stop()
    b = Server(tmp_path / "b", "-np", "1", "-c", "9216", "--cache-dir", folder, "--metrics", model=model)
    try:
        fourth = complete(b, turn4, 8)
        assert fourth["timings"]["cache_n"] == held, (fourth["timings"], b.log())
        assert fourth["timings"]["prompt_n"] == len(turn4) - held
        fresh = complete(b, turn4, 8, cache_prompt=False, cache_salt="fresh")
        assert fourth["tokens"] == fresh["tokens"] and fourth["content"] == fresh["content"]
    finally:
        b.stop()
    assert b.proc.returncode == 0, b.log()


def damage_truncate(path, _others):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def damage_flip_a_bit(path, _others):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))


def damage_foreign(path, others):
    # Another page's intact record under this page's name: not the page the chain expects.
    with open(others[0], "rb") as src, open(path, "wb") as dst:
        dst.write(src.read())


def test_damaged_or_foreign_records_are_dropped_and_recomputed(tmp_path, reference):
    prompt = reference[5]["prompt_tokens"] + reference[3]["prompt_tokens"] + reference[1]["prompt_tokens"]
    folder = str(tmp_path / "pages")
    plain = Server(tmp_path / "plain", "-np", "1")
    try:
        want = complete(plain, prompt, 6)
    finally:
        plain.stop()
    seed = Server(tmp_path / "seed", "-np", "1", "--cache-dir", folder, "--metrics")
    try:
        complete(seed, prompt, 6)
        assert wait_for(lambda: written(seed))
    finally:
        seed.stop()
    n_pages = (len(prompt) - 1) // P
    assert len(records(folder)) >= n_pages
    intact = {name: open(os.path.join(folder, name), "rb").read() for name in records(folder)}
    with open(os.path.join(folder, "notes.txt"), "w") as f:  # not a record: left alone
        f.write("keep me")

    for damage in (damage_truncate, damage_flip_a_bit, damage_foreign):
        for name, data in intact.items():  # every record intact again
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        victim = os.path.join(folder, full_page_records(folder)[0])
        damage(victim, [os.path.join(folder, n) for n in records(folder)[1:]])
        damaged = open(victim, "rb").read()
        s = Server(tmp_path / damage.__name__, "-np", "1", "--cache-dir", folder, "--metrics")
        try:
            got = complete(s, prompt, 6)
            assert got["tokens"] == want["tokens"], damage.__name__  # never served
            assert got["timings"]["cache_n"] < n_pages * P, (damage.__name__, got["timings"])
            assert metric(s, "tier_pages_refused_total") == 1, (damage.__name__, s.log())
            assert metric(s, "disk_tier_pages_forgotten_total") == 1
            assert "from the page tier is " in s.log() and "computed again" in s.log()
            # The page was computed again and stored again, intact.
            assert wait_for(lambda: written(s) and os.path.exists(victim))
            assert open(victim, "rb").read() == intact[os.path.basename(victim)] != damaged
            again = complete(s, prompt + [21, 22], 2)
            assert again["timings"]["cache_n"] >= n_pages * P
        finally:
            s.stop()
    assert open(os.path.join(folder, "notes.txt")).read() == "keep me"


def test_the_folder_stays_within_its_bound(tmp_path):
    folder = str(tmp_path / "pages")
    s = Server(tmp_path / "s", "-np", "1", "--cache-dir", folder, "--cache-dir-mib", "1", "--metrics")
    try:
        for i in range(14):  # distinct prompts of 24 pages each: 336 records of 4,200 bytes > 1 MiB
            complete(s, list(range(100 + 400 * i, 100 + 400 * i + 390)), 1)
        assert wait_for(lambda: written(s))
        on_disk = sum(os.path.getsize(os.path.join(folder, f)) for f in records(folder))
        assert on_disk <= 1 << 20 and metric(s, "disk_tier_bytes") == on_disk
        assert metric(s, "disk_tier_pages_evicted_total") > 0
    finally:
        s.stop()


def test_a_damaged_hybrid_snapshot_is_dropped_and_recomputed(tmp_path, reference):
    hybrid = os.path.join(FIXTURES, "models", "qwen35moe-micro.gguf")
    prompt = reference[5]["prompt_tokens"] + reference[3]["prompt_tokens"]
    folder = str(tmp_path / "pages")
    seed = Server(tmp_path / "seed", "-np", "1", "--cache-dir", folder, "--metrics", model=hybrid)
    try:
        first = complete(seed, prompt, 6)
        assert wait_for(lambda: written(seed))
    finally:
        seed.stop()
    snapshots = [n for n in records(folder) if open(os.path.join(folder, n), "rb").read(4) == b"AKSN"]
    assert snapshots, records(folder)
    for name in snapshots:
        damage_flip_a_bit(os.path.join(folder, name), [])
    follow = prompt + first["tokens"] + [21, 22]
    s = Server(tmp_path / "s", "-np", "1", "--cache-dir", folder, "--metrics", model=hybrid)
    try:
        got = complete(s, follow, 4)
        assert "not a snapshot this memory can take" in s.log(), s.log()
        assert metric(s, "tier_snapshots_fetched_total") == 0
        assert got["timings"]["cache_n"] < len(prompt), got["timings"]
        assert got["tokens"] == complete(s, follow, 4, cache_prompt=False, cache_salt="fresh")["tokens"]
    finally:
        s.stop()
