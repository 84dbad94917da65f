"""Smoke tests of the measurement benches (agentkv bench turns | handoff | fakeprefix) on the tiny
fixture models: they assert the invariants the benches exist to check (prompt_n / cache_n, answers
equal to fresh runs, only the new tokens evaluated), never timings."""

import json
import os
import subprocess
import xml.dom.minidom

import pytest

from conftest import FIXTURES, MODEL, Server, _find_binary, needs_fixtures

HYBRID = os.path.join(FIXTURES, "models", "qwen35moe-micro.gguf")


def bench(*args, timeout=240):
    return subprocess.run([_find_binary(), "bench", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def dense_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("bench-dense"), "-np", "2", "-c", "2048")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def hybrid_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("bench-hybrid"), "-np", "2", "-c", "2048", model=HYBRID)
    yield s
    s.stop()


def url(server):
    return "http://127.0.0.1:%d" % server.port


def test_turns_reuse_exactly_what_the_slot_kept(dense_server, hybrid_server, tmp_path):
    out = tmp_path / "turns"
    r = bench("turns", "--server", url(dense_server), "--server", url(hybrid_server), "--turns", "4",
              "--system", "40", "--new", "12,20", "--answer", "4", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    turns = json.loads((out / "turns.json").read_text())["turns"]
    assert len(turns) == 2 * 2 * 4  # servers x modes x turns
    by_run = {}
    for t in turns:
        by_run.setdefault((t["server"], t["mode"]), []).append(t)
    assert len(by_run) == 4
    for (server, mode), run in by_run.items():
        for prev, t in zip([None] + run[:-1], run):
            assert t["prompt_n"] + t["cache_n"] == t["prompt_len"], (server, mode, t)
            if mode == "no-cache":
                assert t["cache_n"] == 0 and t["prompt_n"] == t["prompt_len"]
            elif prev is not None:
                # The prompt extends the previous prompt + answer: everything the slot kept is reused.
                assert t["cache_n"] == prev["tokens_cached"] > 0, (server, t)
                assert t["prompt_n"] == t["prompt_len"] - prev["tokens_cached"]
    for name in ("ttft.svg", "prompt-n.svg"):
        xml.dom.minidom.parse(str(out / name))


@needs_fixtures
@pytest.mark.parametrize("model", [MODEL, HYBRID], ids=["dense", "hybrid"])
def test_handoff_in_process(model):
    r = bench("handoff", "-m", model, "--prompt", "48", "--extension", "6", "--gen", "5", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    cases = {c["case"]: c for c in report["cases"]}
    assert report["passed"]
    assert cases["same prompt"]["prompt_n"] == 0
    assert cases["extended prompt"]["prompt_n"] == 6
    for c in cases.values():
        assert c["answer"] == c["fresh_answer"] and len(c["answer"]) == 5
    diverging = cases["diverging 2nd request"]
    if model == MODEL:  # dense keeps the common prefix (24 of 48 + 6 tokens)
        assert diverging["prompt_n"] == diverging["prompt_len"] - 24


@pytest.mark.parametrize("model", [MODEL, HYBRID], ids=["dense", "hybrid"])
def test_handoff_across_servers(model, tmp_path):
    usage = subprocess.run([_find_binary(), "serve", "--help"], capture_output=True, text=True).stdout
    if "adopt" not in usage:
        pytest.skip("this agentkv serve has no slot adopt action yet")
    states = tmp_path / "states"
    states.mkdir()
    (tmp_path / "pre").mkdir()
    (tmp_path / "dec").mkdir()
    pre = Server(tmp_path / "pre", "-np", "1", "-c", "1024", "--slot-save-path", str(states), model=model)
    dec = Server(tmp_path / "dec", "-np", "2", "-c", "1024", "--slot-save-path", str(states), model=model)
    try:
        r = bench("handoff", "--prefill-server", url(pre), "--decode-server", url(dec), "--prompt", "48",
                  "--extension", "6", "--gen", "5", "--json")
        assert r.returncode == 0, r.stdout + r.stderr + dec.log()
        cases = {c["case"]: c for c in json.loads(r.stdout)["cases"]}
        assert cases["same prompt"]["prompt_n"] == 0
        assert cases["extended prompt"]["prompt_n"] == 6
        assert all(c["answer"] == c["fresh_answer"] for c in cases.values())
    finally:
        pre.stop()
        dec.stop()


@needs_fixtures
@pytest.mark.parametrize("model", [MODEL, HYBRID], ids=["dense", "hybrid"])
def test_fakeprefix_in_process_evaluates_only_new_tokens(model, tmp_path):
    out = tmp_path / "fp"
    r = bench("fakeprefix", "-m", model, "-L", "0,40", "--new", "8", "--bucket", "16", "--baseline",
              "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    steps = json.loads((out / "steps.json").read_text())["steps"]
    assert [(s["L"], s["new_tokens"]) for s in steps] == [(0, 8), (48, 8)]  # 40 rounded up to 16s
    for s in steps:
        assert s["keys_attended_fake"] == s["keys_attended_real"]
        if model == MODEL:  # every attention layer reads L + i + 1 keys for new token i
            assert s["keys_attended_fake"] == sum(s["L"] + i + 1 for i in range(8))
        assert s["measured_s"] > 0 and s["baseline_s"] > 0
    for name in ("measured-vs-estimate.svg", "ratio.svg", "speedup.svg"):
        xml.dom.minidom.parse(str(out / name))
    # --replot rewrites the same report from steps.json, measuring nothing.
    summary = (out / "summary.md").read_text()
    steps_json = (out / "steps.json").read_text()
    for name in ("summary.md", "ratio.svg"):
        (out / name).unlink()
    r = bench("fakeprefix", "--replot", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "summary.md").read_text() == summary
    assert json.loads((out / "steps.json").read_text()) == json.loads(steps_json)
    xml.dom.minidom.parse(str(out / "ratio.svg"))


def test_fakeprefix_replot_of_a_bad_report_is_a_clear_error(tmp_path):
    (tmp_path / "steps.json").write_text('{"steps": [{"L": 3}]}')
    r = bench("fakeprefix", "--replot", str(tmp_path))
    assert r.returncode == 1
    assert "steps.json" in r.stderr and "new_tokens" in r.stderr


def test_fakeprefix_against_the_server(dense_server):
    r = bench("fakeprefix", "--server", url(dense_server), "-L", "0,100", "--new", "8", "--bucket", "32")
    assert r.returncode == 0, r.stdout + r.stderr  # it aborts unless prompt_n == new and cache_n == L


@needs_fixtures
def test_fakeprefix_screenshot_steps_encode_and_prefill_only_the_new_rows(tmp_path):
    """A GUI agent's trace: each step's screenshot goes through the projector (its encode time apart)
    and its rows are prefilled with the step's text after the fake prefix; the checks that only the
    new rows were evaluated and that attention read the real prefix's keys cover the image rows."""
    projector = str(tmp_path / "qwen35-micro-vision.gguf")
    r = subprocess.run([_find_binary(), "mkmodel", "--preset", "qwen35-micro-vision", "-o", projector],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    png = os.path.join(os.path.dirname(__file__), "..", "data", "vision", "mtmdref-40x72.png")
    trace = tmp_path / "gui.jsonl"
    trace.write_text('{"step": 0, "depth": 30, "new_tokens": 6, "screenshot": "64x48"}\n'
                     '{"step": 1, "depth": 60, "new_tokens": 5}\n'
                     '{"step": 2, "depth": 90, "new_tokens": 4, "screenshot": "%s"}\n' % png)
    qwen35 = os.path.join(FIXTURES, "models", "qwen35-micro.gguf")
    out = tmp_path / "fp"
    r = bench("fakeprefix", "-m", qwen35, "--mmproj", projector, "--trace", str(trace), "--bucket", "16",
              "--baseline", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    steps = json.loads((out / "steps.json").read_text())["steps"]
    # both images are below the projector's minimum and scaled up to a 4 x 3 / 3 x 4 grid (12 rows)
    assert [s.get("image_tokens", 0) for s in steps] == [12, 0, 12]
    assert steps[0]["encode_s"] > 0 and steps[2]["encode_s"] > 0 and "encode_s" not in steps[1]
    for s in steps:
        assert s["keys_attended_fake"] == s["keys_attended_real"] > 0
        assert s["measured_s"] > 0 and s["baseline_s"] > 0
    summary = (out / "summary.md").read_text()
    assert "| image tokens | encode s |" in summary and "| 15 | 24 |" in summary  # the totals row
    r = bench("fakeprefix", "--replot", str(out))
    assert r.returncode == 0 and (out / "summary.md").read_text() == summary
    # refusals: a screenshot without a projector, a projector for a text-only model, a server run
    r = bench("fakeprefix", "-m", qwen35, "--trace", str(trace))
    assert r.returncode == 1 and "give --mmproj" in r.stderr
    r = bench("fakeprefix", "-m", MODEL, "--mmproj", projector, "--trace", str(trace))
    assert r.returncode == 1 and "takes no image input" in r.stderr
    r = bench("fakeprefix", "--server", "http://127.0.0.1:9", "--trace", str(trace))
    assert r.returncode == 1 and "in-process" in r.stderr


def test_fakeprefix_trace_errors_name_the_line(tmp_path):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"step": 0, "depth": 10, "new_tokens": 5}\n{"step": 1, "depth": 20}\n')
    r = bench("fakeprefix", "-m", MODEL, "--trace", str(trace))
    assert r.returncode == 1
    assert "bad.jsonl:2" in r.stderr and "new_tokens" in r.stderr


@needs_fixtures
@pytest.mark.parametrize("model", [MODEL, HYBRID], ids=["dense", "hybrid"])
def test_speed_bench_reports_median_and_time_split(model):
    r = bench("-m", model, "-p", "32", "-n", "4", "-d", "0,16", "-r", "3", "-o", "json", "--split")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    tests = [(x["test"], x["depth"]) for x in report["results"]]
    assert tests == [("pp32", 0), ("tg4", 0), ("pp32", 16), ("tg4", 16)]
    for x in report["results"]:
        rates = sorted(x["n_tokens"] / s for s in x["samples_s"])
        assert len(rates) == 3 and x["median_ts"] == pytest.approx(rates[1])
        shares = [x["matmul_fraction"], x["attention_fraction"], x["recurrent_fraction"]]
        assert all(f >= 0 for f in shares) and sum(shares) <= 1.0 + 1e-9
        assert x["matmul_fraction"] > 0 and x["attention_fraction"] > 0
        # only the hybrid model has recurrent layers
        assert (x["recurrent_fraction"] > 0) == (model == HYBRID)


@needs_fixtures
def test_speed_bench_without_split_reports_no_fractions():
    r = bench("-m", MODEL, "-p", "8", "-n", "0", "-r", "1", "-o", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    (x,) = json.loads(r.stdout)["results"]
    assert "matmul_fraction" not in x


@needs_fixtures
def test_speed_bench_at_a_fake_depth_with_a_windowed_tail(tmp_path):
    # --fake-depth: d keys without a prefill; every run decodes over all of them (keys read per
    # token = depth + the tokens before it), with the tail in files mapped from a folder
    r = bench("-m", MODEL, "-p", "16", "-n", "4", "-d", "1024", "-r", "2", "-o", "json", "--fake-depth",
              "-ub", "256", "--kv-hot", "256", "--kv-tail-type", "q8_0", "--kv-tail-dir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    tests = [(x["test"], x["depth"]) for x in json.loads(r.stdout)["results"]]
    assert tests == [("pp16", 1024), ("tg4", 1024)]
    assert os.listdir(str(tmp_path)) == []
    r = bench("-m", HYBRID, "-n", "4", "-d", "64", "--fake-depth")
    assert r.returncode != 0 and "dense models only" in r.stderr


@needs_fixtures
def test_tiers_give_every_page_back_and_report_each_tier(tmp_path):
    r = bench("tiers", "-m", MODEL, "-d", "256", "--dir", str(tmp_path / "pages"))
    # It fails by itself when an exact tier's page does not come back byte for byte, or its probe moved.
    assert r.returncode == 0, r.stdout + r.stderr
    assert "256 tokens: 16 pages" in r.stdout
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in r.stdout.splitlines()
            if line.startswith("| warm") or line.startswith("| disk")]
    assert [row[0] for row in rows] == ["warm RAM, exact (zstd -1, byte planes)", "warm RAM, q8_0 (requantized K/V rows)",
                                        "warm RAM, q4_0 (requantized K/V rows)", "disk, page cache warm"]
    ratio = [float(row[2]) for row in rows]
    assert 0 < ratio[0] < 1 and 0.5 < ratio[1] < 0.56 and 0.26 < ratio[2] < 0.31 and ratio[3] == 1
    kl = [float(row[7].split("/")[0]) for row in rows]
    assert kl[0] == 0 and kl[3] == 0 and 0 < kl[1] < kl[2]  # exact tiers move nothing; 4 bits move more than 8
