"""Embeddings (`--embedding`): llama-server's /embedding, /embeddings and OpenAI's /v1/embeddings.
Pooled vectors are compared with llama.cpp's own llama-embedding on the fixture model
(tests/data/embeddings-qwen3-micro.json, the command in its "source"); the shapes, errors and
normalizations with llama-server's rules."""

import base64
import json
import math
import os
import struct

import pytest

from conftest import FIXTURES, REPO, Server, metric

REFERENCE = os.path.join(REPO, "tests", "data", "embeddings-qwen3-micro.json")
HYBRID = os.path.join(FIXTURES, "models", "qwen35moe-micro.gguf")


@pytest.fixture(scope="module")
def reference():
    with open(REFERENCE) as f:
        return json.load(f)


def embed(server, body, path="/v1/embeddings"):
    status, out = server.post(path, body)
    assert status == 200, out
    return out


def close(a, b, tol=2e-5):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


# The reference is llama.cpp's AVX2 build, and agentkv's AVX2 path reproduces it (within the JSON's
# rounding): that path is held to 2e-5. On an AVX-512 machine the native path (its kernels sum in
# another order, as llama.cpp's AVX-512 build does) is held instead to a cross-machine bar, 5e-4
# (measured on a Zen 4: 1.6e-4 at most, last pooling; the scalar path matches the AVX2 order, 8e-8).
LEVELS = [("avx2", 2e-5), ("native", 5e-4)] if "avx512f" in cpu_flags() else [("native", 2e-5)]


@pytest.mark.parametrize("pooling", ["mean", "last", "cls"])
@pytest.mark.parametrize("level,tol", LEVELS)
def test_pooled_vectors_are_llama_cpps(tmp_path, reference, pooling, level, tol):
    env = {"AGENTKV_CPU": "avx2"} if level == "avx2" else None
    s = Server(tmp_path, "-np", "2", "--embedding", "--pooling", pooling, env=env)
    try:
        texts = [c["text"] for c in reference["cases"]]
        out = embed(s, {"input": texts, "model": "any"})
        assert out["object"] == "list" and [d["index"] for d in out["data"]] == [0, 1]
        for case, item in zip(reference["cases"], out["data"]):
            assert item["object"] == "embedding"
            assert close(item["embedding"], case["pooling"][pooling], tol), (pooling, case["text"][:20])
        _, tok = s.post("/tokenize", {"content": texts[0]})
        _, tok2 = s.post("/tokenize", {"content": texts[1]})
        assert out["usage"] == {"prompt_tokens": len(tok["tokens"]) + len(tok2["tokens"]),
                                "total_tokens": len(tok["tokens"]) + len(tok2["tokens"])}
        # The same through the native endpoints, and from token ids.
        for path in ("/embedding", "/embeddings"):
            native = embed(s, {"content": texts[0]}, path)
            assert len(native) == 1 and native[0]["index"] == 0 and len(native[0]["embedding"]) == 1
            assert close(native[0]["embedding"][0], reference["cases"][0]["pooling"][pooling], tol)
        from_ids = embed(s, {"input": [tok["tokens"]]})
        assert close(from_ids["data"][0]["embedding"], reference["cases"][0]["pooling"][pooling], tol)
        # base64: the float32 bytes of the same vector.
        b64 = embed(s, {"input": texts[0], "encoding_format": "base64"})["data"][0]["embedding"]
        raw = base64.b64decode(b64)
        floats = struct.unpack("<%df" % (len(raw) // 4), raw)
        assert close(floats, out["data"][0]["embedding"], 1e-7)
    finally:
        s.stop()


def test_norms_pooling_none_and_errors(tmp_path, reference):
    text = reference["cases"][1]["text"]
    s = Server(tmp_path / "mean", "-np", "1", "--embedding", "--pooling", "mean", "--metrics")
    try:
        unit = embed(s, {"input": text})["data"][0]["embedding"]
        assert abs(math.sqrt(sum(x * x for x in unit)) - 1) < 1e-5
        raw = embed(s, {"input": text, "embd_normalize": -1})["data"][0]["embedding"]
        scale = math.sqrt(sum(x * x for x in raw))
        assert abs(scale - 1) > 1e-3 and close([x / scale for x in raw], unit, 1e-6)
        taxicab = embed(s, {"input": text, "embd_normalize": 1})["data"][0]["embedding"]
        assert abs(sum(abs(x) for x in taxicab) - 1) < 1e-5
        int16 = embed(s, {"input": text, "embd_normalize": 0})["data"][0]["embedding"]
        assert abs(max(abs(x) for x in int16) - 32760) < 1e-2
        for bad, why in (({}, '"input" is required'), ({"input": ""}, "cannot be empty"), ({"input": []}, "cannot be empty"),
                         ({"input": [{"a": 1}]}, "must be a string"), ({"input": "x", "encoding_format": "hex"}, "base64"),
                         ({"input": "x", "embd_normalize": "2"}, "integer"),
                         ({"input": "x", "dimensions": 16}, "'dimensions' is not supported")):
            status, err = s.post("/v1/embeddings", bad)
            assert status == 400 and why in err["error"]["message"], (bad, err)
        status, err = s.post("/completion", {"prompt": "hello"})
        assert status == 501 and "without `--embeddings`" in err["error"]["message"]
        assert embed(s, {"input": text, "model": "any", "user": "u1"})["data"][0]["embedding"] == unit
        # One input over the context refuses the request before any input is evaluated.
        evaluated = metric(s, "prompt_tokens_total")
        status, err = s.post("/v1/embeddings", {"input": [text, list(range(5000))]})
        assert status == 400, err
        assert metric(s, "prompt_tokens_total") == evaluated
    finally:
        s.stop()

    # The fixture has no pooling key: none, as llama.cpp: per-token rows, native API only.
    s = Server(tmp_path / "none", "-np", "1", "--embedding")
    try:
        _, tok = s.post("/tokenize", {"content": text})
        rows = embed(s, {"content": text}, "/embedding")[0]["embedding"]
        assert len(rows) == len(tok["tokens"]) and all(len(r) == len(unit) for r in rows)
        assert abs(math.sqrt(sum(x * x for x in rows[0])) - 1) > 1e-3  # raw hidden states
        status, err = s.post("/v1/embeddings", {"input": text})
        assert status == 400 and "not OAI compatible" in err["error"]["message"]
    finally:
        s.stop()


def test_a_server_without_embedding_refuses_and_hybrid_models_embed(tmp_path):
    plain = Server(tmp_path / "plain", "-np", "1")
    try:
        status, err = plain.post("/v1/embeddings", {"input": "hello"})
        assert status == 501 and "--embeddings" in err["error"]["message"]
        for path in ("/rerank", "/v1/rerank", "/reranking", "/v1/reranking"):  # no classifier heads
            status, err = plain.post(path, {"query": "q", "documents": ["a"]})
            assert status == 501 and "classification head" in err["error"]["message"], path
    finally:
        plain.stop()
    hybrid = Server(tmp_path / "hybrid", "-np", "2", "--embedding", "--pooling", "last", model=HYBRID)
    try:
        out = embed(hybrid, {"input": ["one input", "another, longer input", "one input"]})
        vecs = [d["embedding"] for d in out["data"]]
        assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 for v in vecs)
        assert close(vecs[0], vecs[2], 1e-6) and not close(vecs[0], vecs[1], 1e-3)
    finally:
        hybrid.stop()
