"""The committed trained model (trained/agentkv-tiny, docs/trained-model.md) keeps working: agentkv
loads it, predicts held-out text far better than a unigram model, retrieves a pass key through
`bench quality` and through the HTTP server, and a quantized KV cache costs it little. Small
enough for CI (well under 60 s on 2 cores); the full table is in BENCHMARKS.md."""

import json
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINED = os.environ.get("AGENTKV_TRAINED_MODEL_DIR", os.path.join(REPO, "trained", "agentkv-tiny"))
MODEL = os.path.join(TRAINED, "model.gguf")
TEXT = os.path.join(TRAINED, "heldout.txt")
BINARY = os.environ.get("AGENTKV_BIN", os.path.join(REPO, "build", "agentkv"))


def bench(*args):
    r = subprocess.run([BINARY, "bench", "quality", "-m", MODEL, "-f", TEXT, "-o", "json", "-t", "2", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def summary():
    with open(os.path.join(TRAINED, "summary.json")) as f:
        return json.load(f)


def test_the_model_predicts_and_retrieves(summary):
    report = bench("-c", "512", "--chunks", "6", "--passkey-depths", "256,512,1024", "--passkey-cases", "6",
                   "--kv-types", "f16,q8_0,q4_0")
    f16, q8, q4 = report["results"]
    # A unigram model of the training split scores the held-out text at summary's unigram PPL.
    assert f16["ppl"] < summary["unigram_ppl_heldout"] / 5, (f16["ppl"], summary["unigram_ppl_heldout"])
    assert min(f16["recall"]) >= 5 / 6, f16["passkey_answers"]
    assert q8["kl_mean"] < 0.005 and q8["top1_agreement"] > 0.97, q8
    assert q4["kl_mean"] < 0.1 and min(q4["recall"]) >= 4 / 6, q4
    assert q4["kv_rotation"]["k_block"] == 64 and q4["kv_rotation"]["v_block"] == 64  # rotated by default


def test_the_server_answers_a_pass_key_question(tmp_path):
    import sys
    sys.path.insert(0, os.path.join(REPO, "tests", "server"))
    from conftest import Server
    with open(TEXT, encoding="utf-8") as f:
        filler = f.read()[:3000]
    prompt = filler[:1500] + "The pass key is 73914. Remember it. 73914 is the pass key.\n" + filler[1500:] + \
        "\nWhat is the pass key? The pass key is"
    server = Server(tmp_path, "-np", "1", "-c", "2048", model=MODEL)
    try:
        status, body = server.post("/completion", {"prompt": prompt, "n_predict": 6, "temperature": 0})
        assert status == 200, body
        assert body["content"].strip().startswith("73914"), body["content"]
    finally:
        server.stop()
