"""post_sampling_probs (issue 21, llama-server's field): the probabilities of the distribution each
token was drawn from, after top-k / top-p / min-p and the temperature, checked against the raw
log-probabilities of the same steps."""

import math

import pytest

from conftest import Server

PROMPT = "Today was the day. Today I would finally become a"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("postprobs"), "-np", "1", "-c", "1024", "--backend-sampling")
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


def completion(srv, **fields):
    status, out = srv.post("/completion", dict(dict(prompt=PROMPT, n_predict=6, seed=42), **fields))
    assert status == 200, out
    return out["completion_probabilities"]


@pytest.mark.parametrize("top_k,temperature", [(3, 1.0), (8, 0.7), (40, 1.3)])
def test_the_drawn_distribution_is_the_filtered_softmax(srv, top_k, temperature):
    sampling = dict(top_k=top_k, top_p=1.0, min_p=0.0, temperature=temperature)
    raw = completion(srv, n_probs=top_k, **sampling)
    post = completion(srv, n_probs=top_k, post_sampling_probs=True, **sampling)
    assert [t["id"] for t in raw] == [t["id"] for t in post]  # same seed, same draws
    for r, p in zip(raw, post):
        assert "prob" in p and "top_probs" in p and "logprob" not in p
        # the top-k raw log-probabilities, scaled by 1/temperature and renormalized
        scaled = [x["logprob"] / temperature for x in r["top_logprobs"]]
        m = max(scaled)
        z = sum(math.exp(s - m) for s in scaled)
        expected = {x["id"]: math.exp(s - m) / z for x, s in zip(r["top_logprobs"], scaled)}
        got = {x["id"]: x["prob"] for x in p["top_probs"]}
        assert set(got) == set(expected)
        for tid, prob in got.items():
            assert prob == pytest.approx(expected[tid], rel=1e-3, abs=1e-6)
        probs = [x["prob"] for x in p["top_probs"]]
        assert probs == sorted(probs, reverse=True)
        assert sum(probs) == pytest.approx(1.0, abs=1e-4)
        assert p["prob"] == pytest.approx(expected[p["id"]], rel=1e-3, abs=1e-6)


def test_fewer_than_asked_only_when_they_sum_to_one(srv):
    post = completion(srv, n_probs=10, post_sampling_probs=True, temperature=1.0)
    assert len(post[0]["top_probs"]) == 10  # the first step of a vague prompt keeps many tokens
    for t in post:
        assert all(0.0 < x["prob"] <= 1.0 and x["id"] >= 0 for x in t["top_probs"])
        if len(t["top_probs"]) < 10:
            assert sum(x["prob"] for x in t["top_probs"]) == pytest.approx(1.0, abs=1e-4)


def test_greedy_draws_with_probability_one(srv):
    for t in completion(srv, n_probs=5, post_sampling_probs=True, temperature=0):
        assert t["prob"] == 1.0
        assert t["top_probs"] == [{"id": t["id"], "token": t["token"], "bytes": t["bytes"], "prob": 1.0}]


def test_backend_sampling_is_accepted_and_changes_nothing(srv):
    base = dict(n_probs=10, post_sampling_probs=True, seed=4242)
    assert completion(srv, backend_sampling=True, **base) == completion(srv, backend_sampling=False, **base)
    status, out = srv.post("/completion", {"prompt": "x", "n_predict": 1, "backend_sampling": "gpu"})
    assert status == 400, out


def test_openai_logprobs_after_sampling(srv):
    status, out = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                                                    "logprobs": True, "top_logprobs": 3, "post_sampling_probs": True,
                                                    "top_k": 3, "seed": 1})
    assert status == 200, out
    for t in out["choices"][0]["logprobs"]["content"]:
        assert 0.0 < t["prob"] <= 1.0 and len(t["top_probs"]) <= 3
