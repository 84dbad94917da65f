"""The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) on the random-weight
fixture model: the message shape against the chat endpoint's answer to the same conversation,
the streamed event sequence, tool_use / tool_result round trips (the call forced by tool_choice,
as in test_agent_api.py), usage against count_tokens and the cache, and Anthropic-shaped 400s.
"""

import json

import pytest

from conftest import Server

TOOLS = [
    {"name": "read_file", "description": "Read a file",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string", "maxLength": 16}},
                      "required": ["path"]}},
    {"name": "list_dir", "input_schema": {"type": "object", "properties": {
        "dir": {"enum": [".", "src", "tests"]}, "depth": {"type": "integer"}}, "required": ["dir"]}},
]
QUESTION = {"role": "user", "content": "Which files are in src?"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("anthropic"), "-np", "2", "-c", "8192")
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


def message(srv, body):
    status, out = srv.post("/v1/messages", body)
    assert status == 200, out
    return out


def stream_events(srv, body):
    """POSTs with stream: true; returns [(event name, data)] after checking that they agree."""
    conn = srv.connection()
    try:
        conn.request("POST", "/v1/messages", body=json.dumps(dict(body, stream=True)).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
        text = resp.read().decode()
    finally:
        conn.close()
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ") and len(lines) == 2, block
        name, data = lines[0][len("event: "):], json.loads(lines[1][len("data: "):])
        assert data["type"] == name
        events.append((name, data))
    return events


def check_event_order(events):
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], names
    index = -1
    open_block = False
    for name, data in events[1:-2]:
        if name == "content_block_start":
            assert not open_block and data["index"] == index + 1
            index, open_block = data["index"], True
        elif name in ("content_block_delta", "content_block_stop"):
            assert open_block and data["index"] == index
            open_block = name == "content_block_delta"
        else:
            assert name == "ping", name
    assert not open_block and index >= 0


def streamed_content(events):
    """The content blocks a client assembles from the events (input parsed from partial_json)."""
    blocks = []
    for name, data in events:
        if name == "content_block_start":
            blocks.append(dict(data["content_block"], partial=""))
        elif name == "content_block_delta":
            d, b = data["delta"], blocks[data["index"]]
            if d["type"] == "text_delta":
                b["text"] += d["text"]
            elif d["type"] == "thinking_delta":
                b["thinking"] += d["thinking"]
            else:
                assert d["type"] == "input_json_delta" and b["type"] == "tool_use"
                b["partial"] += d["partial_json"]
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = json.loads(b["partial"]) if b["partial"] else {}
        del b["partial"]
    return blocks


def test_text_message_is_the_chat_answer(srv):
    body = {"model": "claude-x", "max_tokens": 12, "temperature": 0, "cache_prompt": False,
            "system": "Be brief.", "messages": [{"role": "user", "content": "What does a KV cache store?"}]}
    out = message(srv, body)
    assert out["id"].startswith("msg_") and out["type"] == "message" and out["role"] == "assistant"
    assert out["model"] == "claude-x"
    chat = srv.post("/v1/chat/completions", {
        "max_tokens": 12, "temperature": 0, "cache_prompt": False,
        "messages": [{"role": "system", "content": "Be brief."}, body["messages"][0]]})[1]
    choice = chat["choices"][0]
    text = [b for b in out["content"] if b["type"] == "text"]
    assert len(text) == 1 and text[0]["text"] == (choice["message"]["content"] or "")
    assert out["stop_reason"] == {"length": "max_tokens", "stop": "end_turn"}[choice["finish_reason"]]
    assert out["stop_sequence"] is None
    u = out["usage"]
    assert u["output_tokens"] == chat["usage"]["completion_tokens"] <= 12
    assert u["input_tokens"] + u["cache_read_input_tokens"] == chat["usage"]["prompt_tokens"]
    assert u["cache_creation_input_tokens"] == 0


def test_system_blocks_and_content_blocks_render_as_strings(srv):
    def count(body):
        status, out = srv.post("/v1/messages/count_tokens", body)
        assert status == 200 and set(out) == {"input_tokens"}, out
        return out["input_tokens"]
    plain = count({"model": "m", "system": "Be brief.", "messages": [{"role": "user", "content": "Hi there"}]})
    blocks = count({"model": "m", "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}]})
    other = count({"model": "m", "system": "Be very brief.", "messages": [{"role": "user", "content": "Hi there"}]})
    assert plain == blocks and other > plain
    tokenized = srv.post("/tokenize", {"content": srv.post("/apply-template", {"messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]})[1]["prompt"],
        "add_special": True})[1]["tokens"]
    assert plain == len(tokenized)


def test_count_tokens_equals_the_prompt_usage(srv):
    body = {"model": "m", "max_tokens": 4, "system": "Count me.", "tools": TOOLS,
            "messages": [{"role": "user", "content": "A question nobody asked before: 83741?"}]}
    counted = srv.post("/v1/messages/count_tokens", body)[1]["input_tokens"]
    u = message(srv, body)["usage"]
    assert counted == u["input_tokens"] + u["cache_read_input_tokens"]
    without_tools = dict(body)
    del without_tools["tools"]
    assert srv.post("/v1/messages/count_tokens", without_tools)[1]["input_tokens"] < counted


def test_stream_events_add_up_to_the_message(srv):
    body = {"model": "m", "max_tokens": 16, "temperature": 0, "cache_prompt": False,
            "messages": [{"role": "user", "content": "Tell me about pages."}]}
    whole = message(srv, body)
    events = stream_events(srv, body)
    check_event_order(events)
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] > 0
    assert [n for n, _ in events[:2]] == ["message_start", "ping"]
    content = streamed_content(events)
    assert content == whole["content"]
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == whole["stop_reason"]
    assert delta["usage"]["output_tokens"] == whole["usage"]["output_tokens"]


def test_tool_use_round_trip_and_cache(srv):
    body = {"model": "m", "max_tokens": 400, "temperature": 1.0, "seed": 7, "tools": TOOLS,
            "tool_choice": {"type": "tool", "name": "read_file"}, "messages": [QUESTION]}
    out = message(srv, body)
    assert out["stop_reason"] == "tool_use", out
    uses = [b for b in out["content"] if b["type"] == "tool_use"]
    assert uses and all(b["name"] == "read_file" and b["id"].startswith("toolu_") for b in uses), out
    for b in uses:
        assert isinstance(b["input"], dict) and isinstance(b["input"]["path"], str) and len(b["input"]["path"]) <= 16
    first_prompt = out["usage"]["input_tokens"] + out["usage"]["cache_read_input_tokens"]

    def turn(result_content, is_error=None, **extra):
        result = {"type": "tool_result", "tool_use_id": uses[0]["id"], "content": result_content}
        if is_error is not None:
            result["is_error"] = is_error
        results = [result] + [{"type": "tool_result", "tool_use_id": b["id"], "content": "ok"} for b in uses[1:]]
        return dict({"model": "m", "max_tokens": 8, "temperature": 0, "tools": TOOLS,
                     "messages": [QUESTION, {"role": "assistant", "content": out["content"]},
                                  {"role": "user", "content": results + [{"type": "text", "text": "Go on."}]}]},
                    **extra)
    second = message(srv, turn("int main() {}"))
    # The first prompt is reused (its last tokens may be re-cut where the answer joins them).
    assert second["usage"]["cache_read_input_tokens"] >= first_prompt - 2, (out["usage"], second["usage"])
    assert second["stop_reason"] in ("end_turn", "max_tokens", "tool_use")

    # The result text and is_error reach the prompt.
    def count(body):
        body = dict(body)
        del body["max_tokens"], body["temperature"]
        return srv.post("/v1/messages/count_tokens", body)[1]["input_tokens"]
    short = count(turn("int main() {}"))
    assert count(turn([{"type": "text", "text": "int main() {}"}])) == short
    assert count(turn("int main() { return 0; }")) > short
    assert count(turn("int main() {}", is_error=True)) > count(turn("int main() {}", is_error=False)) == short


def test_tool_choice_any_and_no_parallel_calls(srv):
    for seed in range(3):
        out = message(srv, {"model": "m", "max_tokens": 400, "temperature": 1.0, "seed": seed, "tools": TOOLS,
                            "tool_choice": {"type": "any", "disable_parallel_tool_use": True}, "messages": [QUESTION]})
        uses = [b for b in out["content"] if b["type"] == "tool_use"]
        assert out["stop_reason"] == "tool_use" and len(uses) == 1, out
        assert uses[0]["name"] in ("read_file", "list_dir")
    out = message(srv, {"model": "m", "max_tokens": 8, "temperature": 1.0, "seed": 1, "tools": TOOLS,
                        "tool_choice": {"type": "none"}, "messages": [QUESTION]})
    assert all(b["type"] != "tool_use" for b in out["content"])


def test_streamed_tool_use_matches_the_message(srv):
    body = {"model": "m", "max_tokens": 400, "temperature": 1.0, "seed": 11, "cache_prompt": False, "tools": TOOLS,
            "tool_choice": {"type": "tool", "name": "list_dir"}, "messages": [QUESTION]}
    whole = message(srv, body)
    events = stream_events(srv, body)
    check_event_order(events)
    content = streamed_content(events)
    strip = lambda blocks: [{k: v for k, v in b.items() if k != "id"} for b in blocks]
    assert strip(content) == strip(whole["content"])
    assert all(b["id"].startswith("toolu_") for b in content if b["type"] == "tool_use")
    assert any(d["delta"]["type"] == "input_json_delta" for n, d in events if n == "content_block_delta")
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use" == whole["stop_reason"]


def test_stop_sequences(srv):
    base = {"model": "m", "max_tokens": 24, "temperature": 0, "cache_prompt": False,
            "messages": [{"role": "user", "content": "Write."}]}
    free = message(srv, base)["content"][0]["text"]
    # two printable ASCII characters from inside the answer (a random model writes any script)
    starts = [i for i in range(1, len(free) - 1) if all(33 <= ord(c) < 127 for c in free[i:i + 2])]
    assert starts, free
    word = free[starts[0]:starts[0] + 2]
    out = message(srv, dict(base, stop_sequences=[word]))
    assert out["stop_reason"] == "stop_sequence" and out["stop_sequence"] == word, out
    assert out["content"][0]["text"] == free[:free.index(word)]


def test_cache_read_on_a_second_turn(srv):
    first = [{"role": "user", "content": "First turn of a conversation about caches, number 5521."}]
    out = message(srv, {"model": "m", "max_tokens": 6, "temperature": 0, "messages": first})
    first_prompt = out["usage"]["input_tokens"] + out["usage"]["cache_read_input_tokens"]
    assert out["usage"]["input_tokens"] > 10, out["usage"]  # the new question was evaluated
    follow = first + [{"role": "assistant", "content": out["content"]}, {"role": "user", "content": "And then?"}]
    again = message(srv, {"model": "m", "max_tokens": 6, "temperature": 0, "messages": follow})
    assert again["usage"]["cache_read_input_tokens"] >= first_prompt - 2, (out["usage"], again["usage"])


def assert_anthropic_400(srv, body, words, path="/v1/messages"):
    status, out = srv.post(path, body)
    assert status == 400, (body, out)
    assert out["type"] == "error" and out["error"]["type"] == "invalid_request_error", out
    assert set(out) == {"type", "error"} and set(out["error"]) == {"type", "message"}
    assert words in out["error"]["message"], (words, out)


def test_validation_errors_in_anthropic_shape(srv):
    msgs = [{"role": "user", "content": "hi"}]
    assert_anthropic_400(srv, {"model": "m", "messages": msgs}, "max_tokens")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 0, "messages": msgs}, "max_tokens")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]},
                         "role")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": [{"role": "bot", "content": "x"}]}, "role")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "video", "url": "x"}]}]}, "video")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}, "assistant")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}, "tool_use_id")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": msgs + [
        {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]}, "2 or more assistant")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": msgs, "tools": TOOLS,
                               "tool_choice": {"type": "sometimes"}}, "tool_choice")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": msgs,
                               "tool_choice": {"type": "any"}}, "tools")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": msgs,
                               "tools": [{"name": "f"}]}, "input_schema")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": msgs, "best_of": 2}, "best_of")
    assert_anthropic_400(srv, {"model": "m", "max_tokens": 4, "messages": []}, "messages")
    assert_anthropic_400(srv, {"model": "m"}, "messages", path="/v1/messages/count_tokens")
    status, out = srv.post("/v1/messages", b"{not json")
    assert status == 400 and out["type"] == "error" and out["error"]["type"] == "invalid_request_error", out
    # A request that is fine apart from its length: the context-size 400 in Anthropic's shape.
    status, out = srv.post("/v1/messages", {"model": "m", "max_tokens": 4,
                                            "messages": [{"role": "user", "content": "word " * 9000}]})
    assert status == 400 and out["type"] == "error" and out["error"]["type"] == "invalid_request_error", out


def test_api_key_and_auth_error_shape(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", "1024", "--api-key", "sk-test")
    try:
        body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        status, out = s.post("/v1/messages", body)
        assert status == 401 and out == {"type": "error", "error": {"type": "authentication_error",
                                                                     "message": "Invalid API Key"}}, out
        assert s.post("/v1/messages", body, headers={"x-api-key": "sk-test", "anthropic-version": "2023-06-01"})[0] == 200
        # Other routes keep llama-server's shape.
        assert "code" in s.post("/completion", {"prompt": "a"})[1]["error"]
    finally:
        s.stop()
