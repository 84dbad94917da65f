"""`agentkv bench evict` end to end on the fixture qwen3-micro (part of bench_quality_smoke): every
policy at every budget gets a row, a budget of 100 % reproduces the full cache exactly (KL 0, same
PPL), a smaller budget moves the distributions, and the scoring-cost mode times each policy."""

import json
import os
import subprocess

from test_bench_quality import MODEL, REPO, TEXT, needs_fixtures


def evict(*args):
    binary = os.environ.get("AGENTKV_BIN", os.path.join(REPO, "build", "agentkv"))
    return subprocess.run([binary, "bench", "evict", "-m", MODEL, "-f", TEXT, "-t", "2", *args],
                          capture_output=True, text=True, timeout=120)


@needs_fixtures
def test_every_policy_and_budget_is_measured_against_the_full_cache(tmp_path):
    out = tmp_path / "evict.json"
    plot = tmp_path / "kl.svg"
    r = evict("-c", "128", "--chunks", "3", "--score", "16", "--budgets", "1,0.25", "--passkey-depths", "96",
              "--passkey-cases", "1", "--json", str(out), "--plot", str(plot))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    assert [x["policy"] for x in rows] == ["full"] + ["positional", "sinks", "keydiff", "snapkv"] * 2
    full = rows[0]
    for x in rows[1:5]:  # budget 1: nothing is dropped
        assert x["budget"] == 1 and x["mean_kl"] == 0 and x["ppl"] == full["ppl"] and x["top1"] == 1, x
    for x in rows[5:]:
        assert x["budget"] == 0.25 and x["mean_kl"] > 0, x
        assert len(x["recall"]) == 1 and 0 <= x["recall"][0] <= 1
    assert "| keydiff @ 25 % |" in r.stdout
    assert plot.read_text().startswith("<svg")


@needs_fixtures
def test_the_oracle_row_scores_with_the_next_tokens_queries(tmp_path):
    """--oracle adds snapkv scored by the scored tokens' own queries: a row per budget, exact at 100 %
    (the window cut back to its context is the full cache's), a choice of its own below that, and no
    recall (its answers would be what it scores with). That it beats the observable policies is a
    property of a model that uses its context (BENCHMARKS.md); this random-weight fixture does not."""
    out = tmp_path / "evict.json"
    r = evict("-c", "256", "--chunks", "3", "--score", "32", "--budgets", "1,0.5", "--passkey-depths", "128",
              "--passkey-cases", "1", "--oracle", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    full = rows[0]
    oracle = {x["budget"]: x for x in rows if x["oracle"]}
    assert sorted(oracle) == [0.5, 1.0] and all(x["policy"] == "snapkv" and x["recall"] == [] for x in oracle.values())
    assert oracle[1.0]["mean_kl"] == 0 and oracle[1.0]["ppl"] == full["ppl"]
    snapkv = next(x for x in rows if x["policy"] == "snapkv" and x["budget"] == 0.5 and not x["oracle"])
    assert oracle[0.5]["mean_kl"] > 0 and oracle[0.5]["mean_kl"] != snapkv["mean_kl"]
    assert "| snapkv (oracle) @ 50 % |" in r.stdout


@needs_fixtures
def test_the_retrieval_heads_row_keeps_a_window_and_the_kept_heads_tail(tmp_path):
    """--retrieval-heads F adds a row per budget below 1 that the kept heads alone do not exceed: no
    position dropped, a window of every head and the probe's kept heads beyond it. qwen3-micro has 2
    KV heads: F = 0.5 keeps one, so a 75 % budget leaves a window of half the context and 25 % none."""
    out = tmp_path / "evict.json"
    r = evict("-c", "256", "--chunks", "3", "--score", "32", "--budgets", "1,0.75,0.25", "--policies", "positional",
              "--passkey-depths", "128", "--passkey-cases", "1", "--retrieval-heads", "0.5", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    heads = [x for x in rows if x["policy"] == "retrieval-heads"]
    assert [x["budget"] for x in heads] == [0.75], rows
    assert heads[0]["mean_kl"] > 0 and len(heads[0]["recall"]) == 1
    assert "retrieval-head probe" in r.stdout and "| retrieval heads (1) @ 75 % |" in r.stdout
    none = evict("-c", "256", "--chunks", "1", "--score", "32", "--budgets", "0.75", "--policies", "positional",
                 "--passkey-cases", "0", "--retrieval-heads", "0")
    assert none.returncode == 0 and "retrieval" not in none.stdout


@needs_fixtures
def test_the_cost_mode_times_each_policy_against_the_prefill():
    r = evict("--cost-depth", "256", "--policies", "keydiff,snapkv")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "prefill of 256 tokens" in r.stdout
    assert "| keydiff |" in r.stdout and "| snapkv |" in r.stdout
    assert "| retrieval-head probe (once per context) |" in r.stdout


def test_bad_options_are_refused():
    assert evict("--policies", "random").returncode != 0
    assert evict("--budgets", "1.5").returncode != 0
