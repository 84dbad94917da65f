"""`agentkv bench quality` end to end on the random-weight fixture qwen3-micro (run by ctest as
bench_quality_smoke): the bench reproduces its own reference exactly, a quantized KV cache moves
the distributions a little, the JSON carries its fields and a mismatched reference is refused. A
random model retrieves nothing, so pass-key recall is only checked to be a rate."""

import json
import math
import os
import subprocess
import xml.dom.minidom

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.environ.get("AGENTKV_FIXTURES", os.path.join(os.path.dirname(REPO), "shared", "fixtures"))
MODEL = os.path.join(FIXTURES, "models", "qwen3-micro.gguf")
OTHER_MODEL = os.path.join(FIXTURES, "models", "qwen3-micro-q8_0.gguf")
# Without the fixtures (a clone on its own) the tests on them are skipped, as in tests/server/conftest.py.
needs_fixtures = pytest.mark.skipif(not os.path.isdir(FIXTURES), reason="fixtures not found at %s: the full "
                                    "suite needs them beside the clone (README)" % FIXTURES)
TEXT = os.path.join(REPO, "tests", "data", "quality-heldout.txt")
DEPTHS = [96, 160]
# Small windows and few cases keep the whole file well under 30 s on 2 cores.
SMALL = ["--chunks", "3", "--passkey-depths", ",".join(map(str, DEPTHS)), "--passkey-cases", "2", "-t", "2"]


def quality(*args, text=TEXT, model=MODEL, window=64):
    binary = os.environ.get("AGENTKV_BIN", os.path.join(REPO, "build", "agentkv"))
    return subprocess.run([binary, "bench", "quality", "-m", model, "-f", text, "-c", str(window), *SMALL, *args],
                          capture_output=True, text=True, timeout=120)


def ok_json(*args, **kw):
    r = quality("-o", "json", *args, **kw)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("quality") / "f16.ref"
    report = ok_json("--save-reference", str(path))
    return path, report


@needs_fixtures
def test_saving_a_reference_reports_its_run(reference):
    path, report = reference
    assert path.stat().st_size > 0
    assert report["reference"]["source"] == "in-process" and report["reference"]["path"] == str(path)
    assert report["perplexity"] == {"n_ctx": 64, "stride": 32, "n_windows": 3, "n_scored": 96,
                                    "first_scored_token": 32}
    (row,) = report["results"]
    assert row["is_reference"] and row["type_k"] == "f16" and row["type_v"] == "f16"
    assert math.isfinite(row["ppl"]) and row["ppl"] > 1 and row["n_scored"] == 96
    assert row["ppl_delta_pct"] == 0 and row["kl_mean"] is None


@needs_fixtures
def test_reference_reproduced_exactly_and_q8_0_close(reference, tmp_path):
    path, saved = reference
    plot = tmp_path / "recall.svg"
    report = ok_json("--reference", str(path), "--kv-types", "f16,q8_0", "--plot", str(plot))
    assert report["reference"] == {"source": "file", "path": str(path), "type_k": "f16", "type_v": "f16",
                                   "ppl": saved["results"][0]["ppl"]}
    assert report["passkey"] == {"depths": DEPTHS, "cases": 2, "seed": 1}
    f16, q8 = report["results"]
    expected = {"type_k", "type_v", "kv_rotation", "is_reference", "seconds", "ppl", "ppl_delta_pct", "n_scored", "kl_mean",
                "kl_p99", "kl_max", "top1_agreement", "mean_abs_dlogprob_top1", "recall", "passkey_answers"}
    assert set(f16) == expected and set(q8) == expected
    assert q8["kv_rotation"]["k_block"] == 0  # qwen3-micro's head width 32: llama.cpp rotates only multiples of 64
    assert not f16["is_reference"] and not q8["is_reference"]
    # The same settings as the reference: the same distributions, bit for bit.
    assert f16["kl_mean"] == 0 and f16["kl_max"] == 0 and f16["top1_agreement"] == 1
    assert f16["mean_abs_dlogprob_top1"] == 0 and f16["ppl_delta_pct"] == 0
    assert f16["ppl"] == saved["results"][0]["ppl"]
    # q8_0 keys and values: a small, non-zero divergence.
    assert q8["type_k"] == "q8_0" and q8["type_v"] == "q8_0"
    assert 0 < q8["kl_mean"] < 0.01 and q8["kl_mean"] <= q8["kl_p99"] <= q8["kl_max"]
    assert q8["top1_agreement"] > 0.8 and math.isfinite(q8["ppl"])
    for row in (f16, q8):
        assert sorted(row["recall"]) == sorted(str(d) for d in DEPTHS)
        assert all(0 <= x <= 1 for x in row["recall"].values())
        answers = row["passkey_answers"]
        assert [(a["depth"], a["case"]) for a in answers] == [(d, i) for d in DEPTHS for i in range(2)]
        assert all(10000 <= a["key"] <= 99999 and isinstance(a["answer"], str) for a in answers)
        for d in DEPTHS:
            at_d = [a["recalled"] for a in answers if a["depth"] == d]
            assert row["recall"][str(d)] == sum(at_d) / len(at_d)
    # The cases are the same for every setting.
    assert [a["key"] for a in f16["passkey_answers"]] == [a["key"] for a in q8["passkey_answers"]]
    xml.dom.minidom.parse(str(plot))


@needs_fixtures
def test_in_process_reference_table(tmp_path):
    r = quality("--kv-types", "f16,q4_0/f16")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| KV (K/V) | rotated | PPL | ΔPPL % | mean KL | KL p99 | top-1 % | recall @96 | recall @160 |")
    assert lines[2].startswith("| f16/f16 (ref) | — |")
    assert lines[3].startswith("| q4_0/f16 | — |")
    assert "reference: the first row (f16/f16 KV)" in r.stdout


@pytest.mark.parametrize("change, message", [
    ("window", "was made with -c 64 --stride 32, 3 windows, this run uses -c 48 --stride 24, 3 windows"),
    ("text", "was made on another text file"),
    ("model", "was made with another model"),
])
@needs_fixtures
def test_mismatched_reference_is_refused(reference, tmp_path, change, message):
    path, _ = reference
    kw = {}
    if change == "window":
        kw["window"] = 48
    elif change == "text":
        other = tmp_path / "other.txt"
        other.write_text(open(TEXT).read() + "One more line.\n")
        kw["text"] = str(other)
    else:
        kw["model"] = OTHER_MODEL
    r = quality("--reference", str(path), **kw)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert "save it again with --save-reference" in r.stderr


@needs_fixtures
def test_bad_reference_files_are_refused(tmp_path):
    junk = tmp_path / "junk.ref"
    junk.write_bytes(b"not a reference file at all, just bytes" * 4)
    r = quality("--reference", str(junk))
    assert r.returncode != 0 and "bad magic" in r.stderr, r.stderr
    r = quality("--reference", str(junk), "--save-reference", str(tmp_path / "x.ref"))
    assert r.returncode != 0 and "exclude each other" in r.stderr


def test_a_type_that_is_no_kv_cache_type_is_refused_before_any_work():
    r = quality("--kv-types", "f16,q4_K")
    assert r.returncode != 0 and "unsupported cache type 'q4_K'" in r.stderr, r.stderr
    assert "PPL" not in r.stderr  # no setting ran
