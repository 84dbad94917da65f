"""The agent API (issue #13) against a real server on the random-weight fixture model: constrained
decoding (response_format json_schema, native json_schema, GBNF grammar), tool_choice, the
reasoning split, logprobs / n_probs, and the 400 for fields agentkv does not implement.

A random-weight model writes gibberish: whatever it writes under a schema must still parse and
validate, which is what constrained decoding guarantees.
"""

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import Server

N_SAMPLES = 50

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "slug": {"type": "string", "pattern": "^[a-z]{2,6}(-[0-9]{1,3})?$"},
        "kind": {"enum": ["file", "dir", "link"]},
        "size": {"type": "integer", "minimum": -3, "exclusiveMaximum": 250},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1, "maxItems": 3},
        "owner": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/user"}]},
    },
    "required": ["name", "kind", "tags"],
    "$defs": {"user": {"type": "object", "properties": {"id": {"type": "integer"},
                                                        "login": {"type": "string", "maxLength": 8}},
                       "required": ["id"]}},
}


def validate(value, schema, root=None):
    """The part of JSON schema these tests use; raises AssertionError with the path at fault."""
    root = root or schema
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        return validate(value, node, root)
    if "anyOf" in schema:
        errors = []
        for sub in schema["anyOf"]:
            try:
                return validate(value, sub, root)
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError("no anyOf branch matches %r: %s" % (value, errors))
    if "enum" in schema:
        assert value in schema["enum"], (value, schema["enum"])
        return
    if "const" in schema:
        assert value == schema["const"], (value, schema["const"])
        return
    t = schema.get("type")
    if t == "object":
        assert isinstance(value, dict), value
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            assert k in value, "missing %s in %r" % (k, value)
        for k, v in value.items():
            assert k in props, "unexpected key %s" % k
            validate(v, props[k], root)
    elif t == "array":
        assert isinstance(value, list), value
        assert schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", 1 << 30), value
        for v in value:
            validate(v, schema.get("items", {}), root)
    elif t == "string":
        assert isinstance(value, str), value
        assert schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", 1 << 30), value
        assert re.search(schema.get("pattern", ""), value), (schema["pattern"], value)
    elif t in ("integer", "number"):
        assert isinstance(value, int if t == "integer" else (int, float)) and not isinstance(value, bool), value
        assert value >= schema.get("minimum", value) and value <= schema.get("maximum", value), value
        assert value > schema.get("exclusiveMinimum", value - 1) and value < schema.get("exclusiveMaximum", value + 1), value
    elif t == "boolean":
        assert isinstance(value, bool), value
    elif t == "null":
        assert value is None, value


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("agent-api"), "-np", "4", "-c", "8192")
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


def sample_many(server, path, body, n=N_SAMPLES):
    def one(i):
        status, out = server.post(path, dict(body, seed=1000 + i))
        assert status == 200, out
        return out
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(n)))


def chat_text(out):
    return out["choices"][0]["message"]["content"]


MESSAGES = [{"role": "user", "content": "Describe a file as JSON."}]


@pytest.mark.parametrize("how", ["response_format", "json_schema"])
def test_schema_constrained_samples_all_validate(srv, how):
    body = {"messages": MESSAGES, "temperature": 1.0, "max_tokens": 400}
    if how == "response_format":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "file", "schema": SCHEMA}}
    else:
        body["json_schema"] = SCHEMA
    outs = sample_many(srv, "/v1/chat/completions", body)
    texts = set()
    for out in outs:
        assert out["choices"][0]["finish_reason"] == "stop", out
        value = json.loads(chat_text(out))
        validate(value, SCHEMA)
        texts.add(chat_text(out))
    assert len(texts) > N_SAMPLES // 2  # really sampled


def test_gbnf_grammar_samples_all_match(srv):
    grammar = r'''root ::= "move " dir " " num ("," ws "then " dir)?
dir ::= "north" | "south" | "east" | "west"
num ::= [1-9] [0-9]{0,2}
ws ::= " "?
'''
    pattern = re.compile(r"^move (north|south|east|west) [1-9][0-9]{0,2}(, ?then (north|south|east|west))?$")
    outs = sample_many(srv, "/completion", {"prompt": "Where to go?", "grammar": grammar, "temperature": 1.0,
                                            "n_predict": 64})
    for out in outs:
        assert out["stop_type"] == "eos", out
        assert pattern.match(out["content"]), out["content"]


def test_json_object_and_other_endpoint(srv):
    status, out = srv.post("/v1/completions", {"prompt": "JSON:", "response_format": {"type": "json_object"},
                                               "temperature": 1.0, "max_tokens": 300, "seed": 3})
    assert status == 200, out
    if out["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(out["choices"][0]["text"]), dict)


def test_bad_constraints_are_400(srv):
    cases = [
        {"prompt": "x", "grammar": "root ::= undefined-rule"},
        {"prompt": "x", "grammar": "root ::= \"a"},
        {"prompt": "x", "grammar": 5},
        {"prompt": "x", "json_schema": {"type": "strange"}},
        {"prompt": "x", "json_schema": {"$ref": "#/$defs/missing"}},
        {"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {"type": "object"}},
        {"prompt": "x", "response_format": {"type": "xml"}},
        {"prompt": "x", "response_format": {"type": "json_schema"}},
        {"prompt": "x", "post_sampling_probs": "yes"},
        {"prompt": "x", "typical_p": 0.5},
        {"prompt": "x", "mirostat": 2},
        {"prompt": "x", "no_such_field": 1},
    ]
    for body in cases:
        status, out = srv.post("/completion", dict(body, n_predict=1))
        assert status == 400, (body, out)
        assert out["error"]["type"] == "invalid_request_error"
    status, out = srv.post("/completion", {"prompt": "x", "n_predict": 1, "wrong_field": True})
    assert "'wrong_field'" in out["error"]["message"]
    # A schema keyword the grammar cannot enforce is named, never dropped in silence (in a tool's
    # parameters as in a response format).
    for schema, named in [({"type": "string", "pattern": "^(?=a)[a-z]+$"}, "lookaround"),
                          ({"type": "number", "multipleOf": 0.5}, "'multipleOf'"),
                          ({"type": "string", "format": "regex"}, "'regex'")]:
        status, out = srv.post("/completion", {"prompt": "x", "n_predict": 1, "json_schema": schema})
        assert status == 400 and named in out["error"]["message"], (schema, out)
        tool = {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": schema}, "required": ["a"]}}}
        status, out = srv.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 1, "tools": [tool]})
        assert status == 400 and named in out["error"]["message"], (schema, out)
    # Neutral values of fields agentkv does not implement are fine.
    status, out = srv.post("/completion", {"prompt": "x", "n_predict": 1, "typical_p": 1.0, "mirostat": 0,
                                           "ignore_eos": False, "user": "me"})
    assert status == 200, out
    chat_cases = [
        {"tool_choice": "required"},
        {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function",
                                                                                  "function": {"name": "g"}}},
        {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "sometimes"},
        {"tools": [{"type": "function"}]},
        {"tools": [{"type": "function", "function": {"name": "f"}}], "grammar": "root ::= \"a\""},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "bad"}}}]},
        {"top_logprobs": 2},
        {"logprobs": True, "top_logprobs": 21},
        {"reasoning_format": "strange"},
        {"prompt": "not for chat"},
    ]
    for extra in chat_cases:
        status, out = srv.post("/v1/chat/completions", dict({"messages": MESSAGES, "max_tokens": 1}, **extra))
        assert status == 400, (extra, out)


TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                      "parameters": {"type": "object", "properties": {
                                          "path": {"type": "string", "maxLength": 16}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "list_dir", "parameters": {"type": "object", "properties": {
        "dir": {"enum": [".", "src", "tests"]}, "depth": {"type": "integer"}}, "required": ["dir"]}}},
]


def tool_body(**extra):
    return dict({"messages": MESSAGES, "tools": TOOLS, "temperature": 1.0, "max_tokens": 800}, **extra)


def check_calls(out, names):
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    calls = choice["message"]["tool_calls"]
    assert calls and choice["message"]["content"] is None
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_")
        assert c["function"]["name"] in names
        validate(json.loads(c["function"]["arguments"]), schemas[c["function"]["name"]])
    return calls


def test_tool_choice_required_named_and_parallel(srv):
    for seed in range(6):
        check_calls(srv.post("/v1/chat/completions", tool_body(tool_choice="required", seed=seed))[1],
                    {"read_file", "list_dir"})
        calls = check_calls(srv.post("/v1/chat/completions", tool_body(
            tool_choice={"type": "function", "function": {"name": "list_dir"}}, seed=seed))[1], {"list_dir"})
        single = check_calls(srv.post("/v1/chat/completions", tool_body(
            tool_choice="required", parallel_tool_calls=False, seed=seed))[1], {"read_file", "list_dir"})
        assert len(single) == 1
        assert calls


def test_tool_choice_none_and_auto(srv):
    status, out = srv.post("/v1/chat/completions", tool_body(tool_choice="none", max_tokens=16, seed=1))
    assert status == 200 and "tool_calls" not in out["choices"][0]["message"], out
    # auto: free text, or calls that are valid once "<tool_call>" starts them.
    for seed in range(4):
        status, out = srv.post("/v1/chat/completions", tool_body(max_tokens=48, seed=seed))
        assert status == 200, out
        msg = out["choices"][0]["message"]
        for c in msg.get("tool_calls", []):
            json.loads(c["function"]["arguments"])


def test_streamed_tool_calls_add_up(srv):
    # Both evaluated from scratch, so both run over the same cells: the attention kernels' sums
    # follow the memory's layout, and a long answer computed elsewhere in it may differ.
    body = dict(tool_body(tool_choice="required", seed=11), cache_prompt=False)
    whole = srv.post("/v1/chat/completions", body)[1]
    status, _, events = srv.stream("/v1/chat/completions", dict(body, stream=True))
    assert status == 200 and events[-1] == "[DONE]"
    calls = {}
    finish = None
    for ev in events[:-1]:
        choice = ev["choices"][0]
        delta = choice["delta"]
        for tc in delta.get("tool_calls", []):
            c = calls.setdefault(tc["index"], {"name": "", "arguments": "", "id": None})
            if "id" in tc:
                assert c["id"] is None
                c["id"] = tc["id"]
                c["name"] = tc["function"]["name"]
                assert tc["type"] == "function"
            c["arguments"] += tc["function"].get("arguments", "")
        assert "content" not in delta or delta["content"] is None
        finish = choice["finish_reason"] or finish
    assert finish == "tool_calls"
    expected = whole["choices"][0]["message"]["tool_calls"]
    assert [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)] == \
        [(c["function"]["name"], c["function"]["arguments"]) for c in expected]


def test_reasoning_split(srv):
    grammar = r'root ::= "<think>\nplan the step\n</think>\n\nthe answer"'
    body = {"messages": MESSAGES, "grammar": grammar, "max_tokens": 40, "temperature": 0}
    msg = srv.post("/v1/chat/completions", body)[1]["choices"][0]["message"]
    assert msg["reasoning_content"] == "plan the step" and msg["content"] == "the answer"
    msg = srv.post("/v1/chat/completions", dict(body, reasoning_format="none"))[1]["choices"][0]["message"]
    assert "reasoning_content" not in msg and msg["content"].startswith("<think>")
    _, _, events = srv.stream("/v1/chat/completions", dict(body, stream=True))
    reasoning = "".join(e["choices"][0]["delta"].get("reasoning_content", "") for e in events[:-1] if e["choices"])
    content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    assert (reasoning, content) == ("plan the step", "the answer")


def test_logprobs(srv):
    out = srv.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 6, "temperature": 0,
                                            "logprobs": True, "top_logprobs": 3})[1]
    content = out["choices"][0]["logprobs"]["content"]
    assert len(content) == out["usage"]["completion_tokens"]
    for item in content:
        assert item["logprob"] <= 0 and len(item["top_logprobs"]) == 3
        tops = [t["logprob"] for t in item["top_logprobs"]]
        assert tops == sorted(tops, reverse=True)
        assert item["top_logprobs"][0]["token"] == item["token"]  # greedy: the best one
        assert abs(item["top_logprobs"][0]["logprob"] - item["logprob"]) < 1e-5
        assert bytes(item["bytes"]).decode("utf-8", "replace") == item["token"] or item["bytes"]
    assert "".join(i["token"] for i in content) == out["choices"][0]["message"]["content"]
    out = srv.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2})[1]
    assert out["choices"][0].get("logprobs") is None

    native = srv.post("/completion", {"prompt": "Hello", "n_predict": 5, "n_probs": 4, "temperature": 0})[1]
    probs = native["completion_probabilities"]
    assert len(probs) == 5
    assert [p["id"] for p in probs] == [p["top_logprobs"][0]["id"] for p in probs]
    _, _, events = srv.stream("/completion", {"prompt": "Hello", "n_predict": 5, "n_probs": 4, "temperature": 0,
                                              "stream": True})
    streamed = [p for e in events for p in e.get("completion_probabilities", [])]
    assert [p["id"] for p in streamed] == [p["id"] for p in probs]
    _, _, events = srv.stream("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 6, "temperature": 0,
                                                       "logprobs": True, "stream": True})
    streamed = [p for e in events[:-1] if e["choices"] for p in (e["choices"][0].get("logprobs") or {}).get("content", [])]
    assert len(streamed) == 6
    oai = srv.post("/v1/completions", {"prompt": "Hello", "max_tokens": 3, "logprobs": 2, "temperature": 0})[1]
    assert len(oai["choices"][0]["logprobs"]["content"]) == 3
