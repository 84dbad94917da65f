"""Several completions in one request (issue 21, llama-server's behaviour): OpenAI's `n` choices
and `prompt` as a list of prompts, answered together, streamed apart by "index"."""

import pytest

from conftest import Server

CHAT = {"messages": [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("several"), "-np", "2", "-c", "2048")
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


def test_n_choices_share_the_prompt_and_differ_by_seed(srv):
    for _ in range(2):  # the second time, the prompt is in the cache; one forced slot must not lock up
        status, out = srv.post("/v1/chat/completions", dict(CHAT, max_tokens=6, n=3, seed=7, id_slot=0))
        assert status == 200, out
        assert [c["index"] for c in out["choices"]] == [0, 1, 2]
        assert all(c["message"]["role"] == "assistant" and c["finish_reason"] == "length" for c in out["choices"])
        usage = out["usage"]
        # the prompt counts once, the completions all
        assert usage["completion_tokens"] == 18
        assert usage["total_tokens"] == usage["prompt_tokens"] + 18
    # choice c draws with seed + c: choice 1 of seed 7 is choice 0 of seed 8
    _, pair = srv.post("/v1/chat/completions", dict(CHAT, max_tokens=6, n=2, seed=7))
    _, single = srv.post("/v1/chat/completions", dict(CHAT, max_tokens=6, seed=8))
    assert pair["choices"][1]["message"]["content"] == single["choices"][0]["message"]["content"]
    _, alias = srv.post("/v1/chat/completions", dict(CHAT, max_tokens=2, n_cmpl=2))
    assert len(alias["choices"]) == 2


def test_n_choices_stream_by_index(srv):
    status, _, events = srv.stream("/v1/chat/completions", dict(CHAT, max_tokens=5, n=2, stream=True, temperature=0))
    assert status == 200
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    text = {0: "", 1: ""}
    finished = set()
    for e in events[:-1]:
        for c in e["choices"]:
            text[c["index"]] += c["delta"].get("content") or ""
            if c["finish_reason"]:
                finished.add(c["index"])
    assert finished == {0, 1}
    _, whole = srv.post("/v1/chat/completions", dict(CHAT, max_tokens=5, temperature=0))
    # greedy: both choices are the one greedy answer
    assert text[0] == text[1] == whole["choices"][0]["message"]["content"]


def test_a_list_of_prompts(srv):
    _, tokens = srv.post("/tokenize", {"content": "I believe the meaning of life is", "add_special": True})
    tokens = tokens["tokens"]
    greedy = {"n_predict": 4, "temperature": 0}
    status, one = srv.post("/completion", dict(greedy, prompt=tokens))
    assert status == 200 and isinstance(one["content"], str)
    for prompts in ([tokens, tokens], [tokens, "I believe the meaning of life is"],
                    [tokens, {"prompt_string": "I believe the meaning of life is"}]):
        status, out = srv.post("/completion", dict(greedy, prompt=prompts))
        assert status == 200, out
        assert isinstance(out, list) and [r["index"] for r in out] == [0, 1]
        assert out[0]["content"] == out[1]["content"] == one["content"]
    # ids mixed with text are one prompt
    status, out = srv.post("/completion", dict(greedy, prompt=[1, 2, 3, "x", 4]))
    assert status == 200 and isinstance(out["content"], str)
    # OpenAI completions: one choice per prompt and per n, in order
    status, out = srv.post("/v1/completions", {"prompt": ["a b", "c d"], "n": 2, "max_tokens": 3, "temperature": 0})
    assert status == 200, out
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    assert out["choices"][0]["text"] == out["choices"][1]["text"]
    _, a = srv.post("/v1/completions", {"prompt": "a b", "max_tokens": 3, "temperature": 0})
    _, c = srv.post("/v1/completions", {"prompt": "c d", "max_tokens": 3, "temperature": 0})
    assert out["usage"]["prompt_tokens"] == a["usage"]["prompt_tokens"] + c["usage"]["prompt_tokens"]
    assert out["choices"][2]["text"] == c["choices"][0]["text"]


def test_a_list_of_prompts_streams_by_index(srv):
    status, _, events = srv.stream("/completion", {"prompt": ["a b", "c d"], "n_predict": 3, "temperature": 0, "stream": True})
    assert status == 200
    finals = [e for e in events if e["stop"]]
    assert sorted(e["index"] for e in finals) == [0, 1]
    text = {0: "", 1: ""}
    for e in events:
        text[e["index"]] += e["content"]
    _, b = srv.post("/completion", {"prompt": "c d", "n_predict": 3, "temperature": 0})
    assert text[1] == b["content"]


def test_bad_lists_and_counts_are_400(srv):
    for body in ({"prompt": [[1], True]}, {"prompt": [[[1]]]}, {"prompt": "x", "n": 0}, {"prompt": "x", "n": 65},
                 {"prompt": ["x"] * 65, "n": 2}, {"prompt": "x", "n": "two"}):
        status, out = srv.post("/completion", dict(body, n_predict=1))
        assert status == 400, (body, out)
    status, out = srv.post("/v1/chat/completions", dict(CHAT, max_tokens=1, n=129))
    assert status == 400
