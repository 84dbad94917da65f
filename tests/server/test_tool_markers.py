"""Tool formats whose markers are control tokens (Mistral's [TOOL_CALLS] / [CALL_ID] / [ARGS]), on the
mistral-micro preset (Mistral Small 3.2's chat vocabulary and template). A real Mistral model starts
a call with the [TOOL_CALLS] control token; a control token renders no text, so unless the server
keeps the format's markers (llama.cpp's preserved tokens) the lazy grammar of tool_choice "auto"
never sees its trigger and the call comes back as content. A logit bias makes the random-weight
model write the control token, as a trained one does.
"""

import json

import pytest

from conftest import Server, model_file

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string", "maxLength": 16}}, "required": ["path"]}}}]
MESSAGES = [{"role": "user", "content": "Read the README."}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("tool-markers"), "-np", "2", "-c", "8192", model=model_file("mistral"))
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


def marker_id(srv, text):
    status, out = srv.post("/tokenize", {"content": text, "parse_special": True})
    assert status == 200 and len(out["tokens"]) == 1, out
    return out["tokens"][0]


def body(srv, **extra):
    return dict({"messages": MESSAGES, "tools": TOOLS, "temperature": 0, "max_tokens": 200, "parallel_tool_calls": False,
                 "logit_bias": [[marker_id(srv, "[TOOL_CALLS]"), 100]]}, **extra)


def check_call(msg):
    assert msg["content"] is None, msg
    (call,) = msg["tool_calls"]
    assert call["function"]["name"] == "read_file"
    assert set(json.loads(call["function"]["arguments"])) == {"path"}
    assert len(call["id"]) == 9 and call["id"].isalnum()  # what the template takes back
    return call


def test_control_token_marker_starts_a_call_under_auto(srv):
    status, out = srv.post("/v1/chat/completions", body(srv))
    assert status == 200, out
    assert out["choices"][0]["finish_reason"] == "tool_calls", out
    call = check_call(out["choices"][0]["message"])

    # Streamed: the same call, in deltas.
    status, _, events = srv.stream("/v1/chat/completions", body(srv, stream=True))
    assert status == 200
    name, args, content = "", "", ""
    for e in events:
        if e == "[DONE]" or not e["choices"]:
            continue
        delta = e["choices"][0]["delta"]
        content += delta.get("content") or ""
        for d in delta.get("tool_calls", []):
            name += d["function"].get("name") or ""
            args += d["function"].get("arguments") or ""
    assert content == "" and name == "read_file" and args == call["function"]["arguments"], events

    # The next turn's prompt renders the call with the same control tokens: only the new tokens.
    messages = MESSAGES + [{"role": "assistant", "content": None, "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": call["id"], "content": "# agentkv"}]
    status, again = srv.post("/v1/chat/completions", body(srv, messages=messages, logit_bias=[]))
    assert status == 200, again
    assert again["timings"]["cache_n"] >= out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"] - 1, again


def test_markers_render_no_text_without_tools(srv):
    # As llama-server: the markers are kept only where a tool format parses them.
    b = body(srv, max_tokens=4)
    del b["tools"]
    status, out = srv.post("/v1/chat/completions", b)
    assert status == 200, out
    assert "[TOOL_CALLS]" not in (out["choices"][0]["message"]["content"] or ""), out
