"""llama-server's token counting endpoints: POST /v1/chat/completions/input_tokens and
/v1/responses/input_tokens answer how many tokens the request's prompt is, evaluating nothing,
and agree with the usage the same request reports when it runs."""

CHAT = {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Count me, please."}]}


def test_chat_input_tokens_match_the_completions_usage(server):
    for path in ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"):
        status, out = server.post(path, CHAT)
        assert status == 200, out
        assert out["object"] == "response.input_tokens" and out["input_tokens"] > 10
    status, ran = server.post("/v1/chat/completions", {**CHAT, "max_tokens": 1, "temperature": 0})
    assert status == 200, ran
    assert ran["usage"]["prompt_tokens"] == out["input_tokens"]
    status, err = server.post("/v1/chat/completions/input_tokens", {"prompt": "no messages"})
    assert status == 400 and "messages" in err["error"]["message"]


def test_responses_input_tokens_match_the_responses_usage(server):
    body = {"input": "Count me, please.", "instructions": "You are terse."}
    for path in ("/responses/input_tokens", "/v1/responses/input_tokens"):
        status, out = server.post(path, body)
        assert status == 200, out
        assert out["object"] == "response.input_tokens"
    status, ran = server.post("/v1/responses", {**body, "max_output_tokens": 1, "temperature": 0})
    assert status == 200, ran
    assert ran["usage"]["input_tokens"] == out["input_tokens"]
