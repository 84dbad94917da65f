"""logit_bias: the OpenAI form {"token id": bias} and llama-server's [[token id, bias]], false bans;
a text instead of an id names the text's tokens (llama-server)."""

import pytest

GREEDY = {"temperature": 0, "return_tokens": True}


def complete(server, prompt, n_predict, **extra):
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": n_predict, **GREEDY, **extra})
    assert status == 200, body
    return body


def test_a_large_bias_forces_the_token(server, reference):
    prompt = reference[0]["prompt_tokens"]
    forced = 8315  # " agent"
    assert forced not in complete(server, prompt, 4, cache_prompt=False)["tokens"]
    assert complete(server, prompt, 4, logit_bias={str(forced): 100})["tokens"] == [forced] * 4
    assert complete(server, prompt, 4, logit_bias=[[forced, 100.0]])["tokens"] == [forced] * 4
    # A text names its tokens (llama-server's rule): " agent" is one token, both forms.
    assert complete(server, prompt, 4, logit_bias=[[" agent", 100.0]])["tokens"] == [forced] * 4
    assert complete(server, prompt, 4, logit_bias={" agent": 100})["tokens"] == [forced] * 4
    # Every token of a longer text is biased: banning them all keeps all of them out.
    status, tok = server.post("/tokenize", {"content": " the agent of"})
    out = complete(server, prompt, 6, logit_bias=[[" the agent of", False]], cache_prompt=False)["tokens"]
    assert not set(out) & set(tok["tokens"])


def test_false_bans_the_token_and_the_saved_logits_stay_unbiased(server, reference):
    prompt = reference[1]["prompt_tokens"]
    session = {"session_id": "bias-ban"}
    plain = complete(server, prompt, 3, **session)["tokens"]
    banned = complete(server, prompt, 3, logit_bias=[[plain[0], False]], **session)
    # The whole prompt is cached with its logits: the bias applies to them, they are not changed.
    assert banned["timings"]["prompt_n"] == 0
    assert banned["tokens"][0] != plain[0]
    again = complete(server, prompt, 3, **session)
    assert again["timings"]["prompt_n"] == 0 and again["tokens"] == plain
    fresh = complete(server, prompt, 3, logit_bias={str(plain[0]): False}, cache_prompt=False)
    assert fresh["tokens"] == banned["tokens"]


@pytest.mark.parametrize("bias, words", [
    ({"-1": 1}, "out of range"),
    ({"": 1}, "has no tokens"),
    ({"151936": 1}, "out of range"),
    ([[5]], "[token id or text, bias]"),
    ([[5, "x"]], "finite number or false"),
    ([[5, True]], "finite number or false"),
    ([[5, 1e300]], "finite number or false"),
    ([[1.5, 1]], "token ids or texts"),
    ("5", "object or an array"),
])
def test_bad_logit_bias_is_a_400(server, bias, words):
    status, body = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                         "max_tokens": 1, "logit_bias": bias})
    assert status == 400, body
    assert body["error"]["type"] == "invalid_request_error" and words in body["error"]["message"], body
