"""The OpenAI Responses API (POST /v1/responses) on the random-weight fixture model: the output
items against the chat endpoint's answer to the same conversation, the streamed event sequence
adding up to the whole response, function_call items (forced by tool_choice, as in
test_agent_api.py) and function_call_output round trips with cache reuse, and the 400s.
"""

import json

import pytest

from conftest import Server

TOOLS = [
    {"type": "function", "name": "read_file", "description": "Read a file",
     "parameters": {"type": "object", "properties": {"path": {"type": "string", "maxLength": 16}}, "required": ["path"]}},
    {"type": "function", "name": "list_dir", "parameters": {"type": "object", "properties": {
        "dir": {"enum": [".", "src", "tests"]}}, "required": ["dir"]}},
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("responses"), "-np", "2", "-c", "8192")
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


def respond(srv, body):
    status, out = srv.post("/v1/responses", body)
    assert status == 200, out
    assert out["object"] == "response" and out["id"].startswith("resp_")
    return out


def stream_events(srv, body):
    conn = srv.connection()
    try:
        conn.request("POST", "/v1/responses", body=json.dumps(dict(body, stream=True)).encode(),
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
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block
        data = json.loads(data[len("data: "):])
        assert data["type"] == name[len("event: "):]
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def without_ids(items):
    """Items without their random ids (item ids and call ids)."""
    return [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in items]


def test_text_response_is_the_chat_answer(srv):
    body = {"model": "gpt-x", "instructions": "Be brief.", "input": "What does a KV cache store?",
            "max_output_tokens": 10, "temperature": 0, "cache_prompt": False, "metadata": {"k": "v"}}
    out = respond(srv, body)
    chat = srv.post("/v1/chat/completions", {"max_tokens": 10, "temperature": 0, "cache_prompt": False, "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "What does a KV cache store?"}]})[1]
    choice = chat["choices"][0]
    messages = [i for i in out["output"] if i["type"] == "message"]
    assert len(messages) == 1 and messages[0]["role"] == "assistant" and messages[0]["status"] == "completed"
    assert messages[0]["content"][0]["type"] == "output_text"
    assert messages[0]["content"][0]["text"] == (choice["message"]["content"] or "")
    assert out["status"] == {"length": "incomplete", "stop": "completed"}[choice["finish_reason"]]
    if out["status"] == "incomplete":
        assert out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["model"] == "gpt-x" and out["instructions"] == "Be brief." and out["max_output_tokens"] == 10
    assert out["metadata"] == {"k": "v"}
    u = out["usage"]
    assert u["input_tokens"] == chat["usage"]["prompt_tokens"] and u["output_tokens"] == chat["usage"]["completion_tokens"]
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]
    # The same conversation as message items (developer = system, content parts).
    items = respond(srv, dict(body, instructions=None, input=[
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"role": "user", "content": "What does a KV cache store?"}]))
    assert items["output"][0]["content"][0]["text"] == messages[0]["content"][0]["text"]


def test_stream_events_add_up_to_the_response(srv):
    body = {"model": "m", "input": "Tell me about pages.", "max_output_tokens": 14, "temperature": 0, "cache_prompt": False}
    whole = respond(srv, body)
    events = stream_events(srv, body)
    names = [e["type"] for e in events]
    assert names[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"], names
    assert names[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response." + whole["status"]], names
    assert set(names[4:-4]) <= {"response.output_text.delta"}
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    text = whole["output"][0]["content"][0]["text"]
    assert deltas == text == events[-4]["text"]
    final = events[-1]["response"]
    assert without_ids(final["output"]) == without_ids(whole["output"])
    assert final["usage"]["output_tokens"] == whole["usage"]["output_tokens"]
    item_id = events[2]["item"]["id"]
    assert all(e["item_id"] == item_id for e in events if "item_id" in e) and final["output"][0]["id"] == item_id


def test_stream_telemetry(srv):
    # llama-server's extensions: prompt_progress on response.in_progress events (return_progress),
    # timings on the events of each token (timings_per_token) and on the last event.
    body = {"model": "m", "input": "This is a test" * 10, "max_output_tokens": 6, "temperature": 0,
            "cache_prompt": False, "timings_per_token": True, "return_progress": True}
    events = stream_events(srv, body)
    progress = [e for e in events if "prompt_progress" in e]
    assert progress and all(e["type"] == "response.in_progress" for e in progress)
    p = progress[-1]["prompt_progress"]
    assert p["total"] == p["processed"] > 0 and p["cache"] == 0
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all("prompt_per_second" in e["timings"] for e in deltas)
    assert events[-1]["timings"]["predicted_n"] == events[-1]["response"]["usage"]["output_tokens"]
    # without the fields, neither
    plain = stream_events(srv, {k: v for k, v in body.items() if k not in ("timings_per_token", "return_progress")})
    assert not any("prompt_progress" in e for e in plain)
    assert not any("timings" in e for e in plain if e["type"] == "response.output_text.delta")


def check_calls(out, names):
    calls = [i for i in out["output"] if i["type"] == "function_call"]
    assert calls, out
    for c in calls:
        assert c["call_id"].startswith("call_") and c["id"].startswith("fc_") and c["status"] == "completed"
        assert c["name"] in names
        args = json.loads(c["arguments"])
        if c["name"] == "read_file":
            assert isinstance(args["path"], str) and len(args["path"]) <= 16
        else:
            assert args["dir"] in (".", "src", "tests")
    return calls


def test_function_calls_and_outputs(srv):
    question = {"role": "user", "content": "Which files are in src?"}
    body = {"model": "m", "input": [question], "tools": TOOLS, "tool_choice": "required", "temperature": 1.0,
            "seed": 5, "max_output_tokens": 400}
    out = respond(srv, body)
    calls = check_calls(out, {"read_file", "list_dir"})
    assert out["status"] == "completed" and out["tools"] == TOOLS and out["tool_choice"] == "required"
    named = respond(srv, dict(body, tool_choice={"type": "function", "name": "list_dir"}, parallel_tool_calls=False))
    assert len(check_calls(named, {"list_dir"})) == 1
    first_prompt = out["usage"]["input_tokens"]

    follow = [question] + [{k: c[k] for k in ("type", "call_id", "name", "arguments")} for c in calls] + \
        [{"type": "function_call_output", "call_id": c["call_id"], "output": "main.cpp util.h"} for c in calls]
    again = respond(srv, {"model": "m", "input": follow, "tools": TOOLS, "tool_choice": "none", "temperature": 0,
                          "max_output_tokens": 8})
    assert all(i["type"] != "function_call" for i in again["output"])
    assert again["usage"]["input_tokens_details"]["cached_tokens"] >= first_prompt - 2, (out["usage"], again["usage"])
    # The output reaches the prompt.
    longer = follow[:-1] + [dict(follow[-1], output="main.cpp util.h util.cpp README.md")]
    a = respond(srv, {"model": "m", "input": follow, "max_output_tokens": 1, "tools": TOOLS})["usage"]["input_tokens"]
    b = respond(srv, {"model": "m", "input": longer, "max_output_tokens": 1, "tools": TOOLS})["usage"]["input_tokens"]
    assert b > a


def test_streamed_function_call_matches(srv):
    body = {"model": "m", "input": "List src.", "tools": TOOLS, "tool_choice": {"type": "function", "name": "list_dir"},
            "temperature": 1.0, "seed": 9, "cache_prompt": False, "max_output_tokens": 400}
    whole = respond(srv, body)
    check_calls(whole, {"list_dir"})
    events = stream_events(srv, body)
    names = [e["type"] for e in events]
    assert names[-1] == "response.completed"
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added and added[0]["item"]["type"] == "function_call" and added[0]["item"]["status"] == "in_progress"
    args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert done and args == "".join(d["arguments"] for d in done)
    assert without_ids(events[-1]["response"]["output"]) == without_ids(whole["output"])


def assert_400(srv, body, words):
    status, out = srv.post("/v1/responses", body)
    assert status == 400 and out["error"]["type"] == "invalid_request_error", (body, out)
    assert words in out["error"]["message"], (words, out)


def test_validation_errors(srv):
    assert_400(srv, {"model": "m"}, "input")
    assert_400(srv, {"model": "m", "input": []}, "input")
    assert_400(srv, {"model": "m", "input": "hi", "previous_response_id": "resp_1"}, "previous_response_id")
    assert_400(srv, {"model": "m", "input": "hi", "max_output_tokens": 0}, "max_output_tokens")
    assert_400(srv, {"model": "m", "input": [{"role": "robot", "content": "x"}]}, "role")
    assert_400(srv, {"model": "m", "input": [{"type": "computer_call"}]}, "computer_call")
    assert_400(srv, {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
               "input_image")
    assert_400(srv, {"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}, "call_id")
    assert_400(srv, {"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}, "function")
    assert_400(srv, {"model": "m", "input": "hi", "tool_choice": "required"}, "tools")
    assert_400(srv, {"model": "m", "input": "hi", "frobnicate": 1}, "frobnicate")
    # text.format json_schema constrains the output as response_format does.
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    out = respond(srv, {"model": "m", "input": "A number as JSON.", "temperature": 1.0, "seed": 3, "max_output_tokens": 60,
                        "text": {"format": {"type": "json_schema", "name": "n", "schema": schema}}})
    if out["status"] == "completed":
        assert isinstance(json.loads(out["output"][0]["content"][0]["text"])["n"], int)
