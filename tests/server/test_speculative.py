"""Speculative decoding in the server (--spec-type ngram-simple, docs/speculative.md): drafts from
the request's own context are verified in the same batch as the slot's token, and the output is the
plain decode's, token for token, at any temperature, on every memory model (dense, hybrid, sliding
window), with 1 or 4 slots at once, with grammars, logprobs, stop strings and streaming.

The property test draws random cases: a few tokens get a large logit bias, so that the model's own
choice among them makes a text whose n-grams repeat often but not always, and drafts are accepted
and rejected in every mix (a hybrid's state goes back and absorbs the accepted tokens again from the
pass's recorded inputs, with no second pass: draft_tokens_replayed_total stays 0). Each
case runs with drafts and without on the same server, and the tokens must be equal. The servers run
with --batch-invariant: a row's numerics do not depend on how many rows the batch has, so "equal"
is exact (with llama.cpp's numerics, as with any cached prompt, a near tie may round otherwise;
docs/speculative.md)."""

import json
import os
import random
import threading

import pytest

from conftest import FIXTURES, MEMORY_MODELS, REPO, Server, metric, model_file

CHECK_ENV = {"AGENTKV_CHECK_MEMORY": "1"}  # the prefix cache's bookkeeping verified after every step
TRAINED = os.path.join(REPO, "trained", "agentkv-tiny", "model.gguf")


def start(tmp_path_factory, key, *extra, slots=4):
    return Server(tmp_path_factory.mktemp("spec-" + key), "-np", str(slots), "-c", "4096", "--metrics", "--batch-invariant",
                  "--spec-type", "ngram-simple", *extra, model=model_file(key), env=CHECK_ENV)


def complete(server, body):
    status, out = server.post("/completion", body)
    assert status == 200, out
    return out


def random_case(rng, temperature=None):
    """A request whose text repeats itself in places: the model chooses among a few biased tokens
    (sampled without filters, which would leave one token where the logits are far apart)."""
    favoured = rng.sample(range(200, 5000), rng.randint(2, 5))
    return {"prompt": "Repeat after me: one two three one two three",
            "n_predict": rng.randint(24, 64),
            "temperature": rng.choice([0, 0.9, 3.0]) if temperature is None else temperature,
            "top_k": 0, "top_p": 1.0, "min_p": 0.0,
            "seed": rng.randint(0, 1000),
            "logit_bias": [[t, 40.0] for t in favoured],
            "return_tokens": True,
            **drafting(rng.randint(1, 64))}


def drafting(n_max):
    """Speculation fields that make the slot draft n_max on every step it finds them: the micro
    models are compute-bound (a batch's rows cost what they would one by one), where the adaptive
    length would soon stop drafting."""
    return {"speculative.n_max": n_max, "speculative.adaptive": False}


def at_once(server, cases):
    """The tokens of each case, all sent at once (each slot with its drafts in the same batches)."""
    results = [None] * len(cases)

    def run(i):
        results[i] = complete(server, cases[i])["tokens"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def plain(body):
    """The run without drafts, under a namespace of its own unless the body names one: the drafted
    run must not recall the reference's answer from its cached pages (PrefixCache::continuation)."""
    return dict({"cache_salt": "plain-reference"}, **body, **{"speculative.type": "none"})


@pytest.mark.parametrize("key", MEMORY_MODELS)
def test_drafts_change_no_token(tmp_path_factory, key):
    server = start(tmp_path_factory, key)
    try:
        rng = random.Random(51 + len(key))
        cases = [random_case(rng, t) for t in [0, 0.9, 3.0, 0, 0.9, 3.0, 0, 3.0]]
        expected = [complete(server, plain(c))["tokens"] for c in cases]
        drafted = accepted = 0
        for case, want in zip(cases, expected):
            got = complete(server, case)
            assert got["tokens"] == want, (key, case)
            drafted += got["timings"].get("draft_n", 0)
            accepted += got["timings"].get("draft_n_accepted", 0)
            assert "draft_n" not in complete(server, plain(case))["timings"]
        # The cases exercise both outcomes: drafts kept and drafts rejected (a hybrid's rollback).
        assert 0 < accepted < drafted, (key, accepted, drafted)

        # Four slots at once, each with its own drafts in one batch, as four plain runs one by one.
        assert at_once(server, cases[:4]) == expected[:4], key
        assert metric(server, "draft_tokens_total") >= drafted
        assert 0 < metric(server, "draft_tokens_accepted_total") < metric(server, "draft_tokens_total")
        # No accepted token is evaluated twice: a hybrid's state replays them from the pass's inputs.
        assert metric(server, "draft_tokens_replayed_total") == 0
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()


@pytest.mark.parametrize("key", ["dense", "hybrid"])
def test_grammar_probs_stops_and_streams_with_drafts(tmp_path_factory, key):
    server = start(tmp_path_factory, key)
    try:
        # A grammar that makes the text repeat; its forbidden drafts are rejected, never emitted.
        base = {"prompt": "Answer yes or no, many times:", "n_predict": 48, "temperature": 0.7, "seed": 5,
                "grammar": 'root ::= ("yes " | "no " | "maybe ")+', "n_probs": 3, "return_tokens": True,
                **drafting(8)}
        want = complete(server, plain(base))
        got = complete(server, base)
        assert got["tokens"] == want["tokens"] and got["content"] == want["content"]
        assert got["completion_probabilities"] == want["completion_probabilities"]
        assert got["timings"].get("draft_n", 0) > 0

        # A stop string inside an accepted run of drafts ends the answer where the plain run does.
        case = random_case(random.Random(7))
        text = complete(server, plain(case))["content"]
        stop = text[len(text) // 2: len(text) // 2 + 3]
        if stop.strip():
            stopped = dict(case, stop=[stop])
            assert complete(server, stopped)["content"] == complete(server, plain(stopped))["content"]

        # Streaming: tokens go out as they are accepted, several per event at times; the text is the same.
        status, _, events = server.stream("/completion", dict(case, stream=True))
        assert status == 200
        streamed = "".join(e.get("content", "") for e in events if isinstance(e, dict))
        assert streamed == complete(server, plain(case))["content"]
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()


def test_hybrid_cache_after_drafts_serves_the_next_turn(tmp_path_factory):
    """A hybrid whose state went back over rejected drafts holds exactly what it says: the next turn reuses
    it and answers as an uncached run (AGENTKV_CHECK_MEMORY verifies the pages after every step)."""
    server = start(tmp_path_factory, "hybrid")
    try:
        rng = random.Random(3)
        for _ in range(3):
            case = random_case(rng)
            case["temperature"] = 0
            first = complete(server, dict(case, session_id="s"))
            _, tok = server.post("/tokenize", {"content": case["prompt"]})
            follow = dict(case, prompt=tok["tokens"] + first["tokens"] + tok["tokens"])
            second = complete(server, dict(follow, session_id="s"))
            assert second["timings"]["cache_n"] > len(tok["tokens"])
            assert second["tokens"] == complete(server, plain(dict(follow, cache_prompt=False)))["tokens"]
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()


def test_drafts_from_what_another_session_wrote(tmp_path_factory):
    """A second session asked what a first one answered drafts from the first one's tokens (the
    memory's other sequences of the same namespace), not from another tenant's."""
    server = start(tmp_path_factory, "hybrid", slots=2)  # its answers do not repeat themselves
    try:
        rng = random.Random(11)
        prompt = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa"]) for _ in range(24))
        body = {"prompt": prompt, "n_predict": 48, "temperature": 0, "return_tokens": True, **drafting(16)}
        first = complete(server, dict(body, id_slot=0, cache_salt="team"))
        other_tenant = complete(server, dict(body, id_slot=1, cache_salt="stranger"))
        same_tenant = complete(server, dict(body, id_slot=1, cache_salt="team"))
        assert first["tokens"] == other_tenant["tokens"] == same_tenant["tokens"]
        got, control = same_tenant["timings"], other_tenant["timings"]
        assert got.get("draft_n_accepted", 0) >= control.get("draft_n_accepted", 0) + 20, (got, control)
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()


def test_drafts_from_a_conversation_no_slot_holds(tmp_path_factory):
    """One slot: a first conversation, then another takes the slot (the first one's sequence is
    gone, its pages stay cached). Asked the first prompt again, the slot drafts the first answer
    from the cached pages (PrefixCache::continuation); another tenant's salt drafts nothing from them."""
    server = start(tmp_path_factory, "hybrid", slots=1)
    try:
        rng = random.Random(12)
        prompt = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa"]) for _ in range(24))
        body = {"prompt": prompt, "n_predict": 48, "temperature": 0, "return_tokens": True, **drafting(16)}
        first = complete(server, plain(dict(body, cache_salt="team")))
        complete(server, plain(dict(body, prompt="Something else entirely, with other words. " * 4, cache_salt="team")))
        again = complete(server, dict(body, cache_salt="team"))
        control = complete(server, dict(body, cache_salt="stranger"))
        assert again["tokens"] == first["tokens"] == control["tokens"]
        got, other = again["timings"], control["timings"]
        assert got.get("draft_n_accepted", 0) >= other.get("draft_n_accepted", 0) + 20, (got, other)
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()


def test_copying_text_is_mostly_drafted():
    """The agent-edit pattern on the trained model: text the context holds is written again. Most of
    it comes from accepted drafts, and the answer is the plain one."""
    import tempfile
    with open(os.path.join(REPO, "trained", "agentkv-tiny", "heldout.txt")) as f:
        code = f.read()[:1200]
    cut = code.rfind("\n", 0, 400) + 1
    prompt = code + "\n\n" + code[:cut]
    server = Server(tempfile.mkdtemp(prefix="spec-trained-"), "-np", "2", "-c", "2048", "--batch-invariant",
                    "--spec-type", "ngram-simple", model=TRAINED)
    try:
        body = {"prompt": prompt, "n_predict": 160, "temperature": 0, "return_tokens": True, **drafting(16)}
        got = complete(server, body)
        assert got["tokens"] == complete(server, plain(body))["tokens"]
        t = got["timings"]
        assert t["draft_n_accepted"] >= 0.5 * t["predicted_n"], t
        assert t["draft_n_accepted"] >= 0.6 * t["draft_n"], t
    finally:
        server.stop()


def test_settings_are_reported_and_checked(tmp_path_factory):
    server = start(tmp_path_factory, "dense", "--spec-draft-n-max", "6")
    try:
        _, props = server.get("/props")
        settings = props["default_generation_settings"]
        assert settings["speculative"] is True
        assert settings["params"]["speculative.n_max"] == 6
        assert settings["params"]["speculative.type"] == "ngram-simple"
        _, slots = server.get("/slots")
        assert all(s["speculative"] for s in slots) and "n_draft_tokens" in slots[0]
        for bad in [{"speculative.type": "eagle3"}, {"speculative.n_max": 65}, {"speculative.n_min": -1},
                    {"speculative.n_max": 2, "speculative.n_min": 3}, {"speculative.p_min": 2}]:
            status, body = server.post("/completion", dict({"prompt": "x", "n_predict": 1}, **bad))
            assert status == 400 and "speculative" in body["error"]["message"], (bad, body)
        # The OpenAI chat route takes the same fields.
        status, body = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi hi hi"}],
                                                            "max_tokens": 8, "speculative.n_max": 4})
        assert status == 200, body
    finally:
        server.stop()


def draft_model_file(target, draft):
    return os.path.join(FIXTURES, "models", draft) if draft.endswith(".gguf") else model_file(target)


@pytest.mark.parametrize("target,draft", [("dense", "qwen3-micro-q8_0.gguf"), ("hybrid", "self"), ("gemma3", "self")])
def test_draft_model_changes_no_token(tmp_path_factory, target, draft):
    """-md: drafts from a draft model (its Q8_0 copy; the model itself on a hybrid, whose draft memory
    rolls its recurrent state back after each draft, and on Gemma 3's window memory) are verified as
    n-gram drafts are: every answer is the plain one, greedy and sampled, 1 and 4 slots at once."""
    server = Server(tmp_path_factory.mktemp("spec-md-" + target), "-np", "4", "-c", "4096", "--metrics",
                    "--batch-invariant", "-md", draft_model_file(target, draft), model=model_file(target), env=CHECK_ENV)
    try:
        _, props = server.get("/props")
        assert props["draft_model"] == os.path.basename(draft_model_file(target, draft))
        assert props["default_generation_settings"]["params"]["speculative.type"] == "draft-simple"
        rng = random.Random(7 + len(target))
        cases = [dict(random_case(rng, t), **{"speculative.p_min": 0.0}) for t in [0, 0.9, 3.0, 0, 0.9]]
        # Text the model writes on its own, greedy: a draft model that is the model (or its Q8_0
        # copy) foresees most of it.
        cases.append({"prompt": "Once upon a time", "n_predict": 40, "temperature": 0, "return_tokens": True,
                      "speculative.p_min": 0.0, **drafting(8)})
        expected = [complete(server, plain(c))["tokens"] for c in cases]
        drafted = accepted = 0
        for case, want in zip(cases, expected):
            got = complete(server, case)
            assert got["tokens"] == want, (target, case)
            drafted += got["timings"].get("draft_n", 0)
            accepted += got["timings"].get("draft_n_accepted", 0)
        assert 0 < accepted < drafted, (target, accepted, drafted)
        if draft == "self":  # greedy and its own drafts: each one is the model's choice
            t = got["timings"]
            assert t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"], t
        assert at_once(server, cases[:4]) == expected[:4], target
        # A floor above every probability: the draft model drafts nothing, the answer is unchanged.
        none = complete(server, dict(cases[-1], **{"speculative.p_min": 1.0}))
        assert none["tokens"] == expected[-1] and none["timings"].get("draft_n", 0) == 0
        # Both sources: n-gram drafts first, the draft model where the text holds nothing to copy.
        both = complete(server, dict(cases[0], **{"speculative.type": "ngram-simple,draft-simple"}))
        assert both["tokens"] == expected[0]
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()


def test_draft_model_flags_are_checked(tmp_path_factory):
    import subprocess
    from conftest import _find_binary
    dense = model_file("dense")
    for args, message in [(["--spec-type", "draft-simple"], "-md"),
                          (["-md", model_file("gemma3")], "cannot draft"),
                          (["-md", dense, "--spec-type", "ngram-simple"], "draft-simple"),
                          (["-md", dense, "--draft-p-min", "1.5"], "p-min")]:
        out = subprocess.run([_find_binary(), "serve", "-m", dense, "--port", "0", *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and message in out.stderr + out.stdout, (args, out.stderr)
    # A request may not name a draft model the server does not have.
    server = start(tmp_path_factory, "dense", slots=1)
    try:
        status, body = server.post("/completion", {"prompt": "x", "n_predict": 1, "speculative.type": "draft-simple"})
        assert status == 400 and "draft model" in body["error"]["message"], body
        _, props = server.get("/props")
        assert props["draft_model"] is None
    finally:
        server.stop()


def test_flags_are_checked(tmp_path):
    import subprocess
    from conftest import _find_binary
    for args, message in [(["--spec-type", "draft-mtp"], "draft-mtp"), (["--spec-draft-n-max", "70"], "n-max"),
                          (["--spec-type", "ngram-simple", "--draft-max", "4", "--draft-min", "5"], "n-min")]:
        out = subprocess.run([_find_binary(), "serve", "-m", TRAINED, "--port", "0", *args],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode != 0 and message in out.stderr + out.stdout, (args, out.stderr)
