"""llama-server drop-in pieces outside the new endpoints (issue 21): CORS preflights as llama-server
answers them within agentkv's origin policy, and the llama-server flags `agentkv serve` accepts."""

import json
import subprocess

import pytest

from conftest import MODEL, Server, _find_binary


def preflight(server, path, headers):
    conn = server.connection()
    try:
        conn.request("OPTIONS", path, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


ASK = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, x-api-key, content-type"}


@pytest.fixture(scope="module")
def cors_server(tmp_path_factory):
    # --cors-origins is llama-server's spelling of --cors; an API key must not block preflights.
    s = Server(tmp_path_factory.mktemp("cors"), "-np", "1", "-c", "1024", "--api-key", "k",
               "--cors-origins", "http://app.example,https://ui.example")
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/completion", "/slots", "/nowhere"])
def test_preflight_of_an_allowed_origin(cors_server, path):
    status, h, body = preflight(cors_server, path, dict(ASK, Origin="https://ui.example"))
    assert status == 200 and body == b""
    assert h["access-control-allow-origin"] == "https://ui.example"
    assert h["access-control-allow-methods"] == "GET, POST"
    assert h["access-control-allow-headers"] == ASK["Access-Control-Request-Headers"]
    assert h["access-control-allow-credentials"] == "true"
    assert int(h["access-control-max-age"]) > 0
    assert "Origin" in h["vary"]


def test_preflight_refused_and_odd_headers(cors_server):
    status, h, _ = preflight(cors_server, "/v1/messages", dict(ASK, Origin="http://evil.example"))
    assert status == 403 and "access-control-allow-origin" not in h
    # Requested header names that are not names are not echoed back.
    status, h, _ = preflight(cors_server, "/completion", {"Origin": "http://app.example",
                                                           "Access-Control-Request-Headers": "x;y=\"z\""})
    assert status == 200 and h["access-control-allow-headers"] == "Authorization, Content-Type, X-Api-Key"


def test_cross_origin_request_after_preflight(cors_server):
    body = {"prompt": "a", "n_predict": 1}
    for origin, key, want in [("http://app.example", "k", 200), ("http://app.example", None, 401),
                              ("http://evil.example", "k", 403)]:
        headers = {"Origin": origin}
        if key:
            headers["Authorization"] = "Bearer " + key
        status, _ = cors_server.post("/completion", body, headers=headers)
        assert status == want, (origin, key, status)


def test_default_refuses_cross_origin_preflights(server):
    status, h, _ = preflight(server, "/v1/chat/completions", dict(ASK, Origin="http://app.example"))
    assert status == 403 and "access-control-allow-origin" not in h


def run_serve(*args):
    return subprocess.run([_find_binary(), "serve", "-m", MODEL, "--port", "0", *args],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)


def test_unknown_and_bad_flags_are_clear_errors():
    out = run_serve("--definitely-not-a-flag")
    assert out.returncode == 1 and b"unknown argument '--definitely-not-a-flag'" in out.stdout, out.stdout
    out = run_serve("--chat-template", "llama-nine")
    assert out.returncode == 1 and b"--chat-template 'llama-nine': not a built-in template (chatml, command-r" in out.stdout, out.stdout
    out = run_serve("-fa", "sometimes")  # -fa takes on/off/auto; anything else is not its value
    assert out.returncode == 1 and b"unknown argument 'sometimes'" in out.stdout, out.stdout
    out = run_serve("-n", "-5")
    assert out.returncode == 1 and b"-n must be" in out.stdout, out.stdout
    helptext = subprocess.run([_find_binary(), "serve", "--help"], stdout=subprocess.PIPE).stdout.decode()
    for flag in ["--n-predict", "--temp", "--seed", "--batch-size", "--jinja", "--chat-template", "--no-slots",
                 "--flash-attn", "--offline", "--verbose", "--no-ui", "--kv-unified", "--no-cache-idle-slots",
                 "--cors-origins", "--sleep-idle-seconds", "--backend-sampling"]:
        assert flag in helptext, flag


def test_llama_server_flags(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", "1024", "--n-predict", "5", "--temp", "1.0", "--seed", "42",
               "-b", "64", "--jinja", "-fa", "on", "--flash-attn", "auto", "--no-jinja", "--kv-unified",
               "--no-cache-idle-slots", "--offline", "--no-ui", "--no-webui", "--verbose", "-v", "--no-slots",
               "--chat-template", "chatml")
    try:
        # --no-slots: llama-server's 501; /props says so.
        status, out = s.get("/slots")
        assert status == 501 and out["error"]["type"] == "not_supported_error", out
        props = s.get("/props")[1]
        assert props["endpoint_slots"] is False
        assert props["chat_template"].startswith("{% for message in messages %}<|im_start|>")
        params = props["default_generation_settings"]["params"]
        assert params["n_predict"] == 5 and params["temperature"] == 1.0 and params["seed"] == 42
        # --n-predict: the default length of a request without one, and the cap of one with more.
        ban_eos = {"logit_bias": [[t, False] for t in s.post("/tokenize", {"content": "<|im_end|><|endoftext|>"})[1]["tokens"]]}
        for extra in [{}, {"n_predict": 50}, {"max_tokens": 50}]:
            out = s.post("/completion", dict({"prompt": "Once upon a time"}, **ban_eos, **extra))[1]
            assert out["tokens_predicted"] == 5 and out["stop_type"] == "limit", (extra, out)
        out = s.post("/completion", dict({"prompt": "Once upon a time", "n_predict": 3}, **ban_eos))[1]
        assert out["tokens_predicted"] == 3
        chat = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], **ban_eos})[1]
        assert chat["usage"]["completion_tokens"] == 5 and chat["choices"][0]["finish_reason"] == "length"
        # --temp 1.0 with --seed 42: requests without a seed sample the same text.
        texts = {s.post("/completion", {"prompt": "Seeded", "cache_prompt": False})[1]["content"] for _ in range(3)}
        assert len(texts) == 1
        varied = {s.post("/completion", {"prompt": "Seeded", "seed": i, "cache_prompt": False})[1]["content"]
                  for i in range(4)}
        assert len(varied) > 1
    finally:
        s.stop()
    assert s.proc.returncode == 0, s.log()


def test_chat_template_file_and_reasoning_flags(tmp_path):
    template = tmp_path / "template.jinja"
    template.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                        "{% if add_generation_prompt %}[assistant]{% endif %}")
    hi = {"messages": [{"role": "user", "content": "hi"}]}
    s = Server(tmp_path / "file", "-np", "1", "-c", "512", "--chat-template-file", str(template))
    try:
        assert s.get("/props")[1]["chat_template"] == template.read_text()
        assert s.post("/apply-template", hi)[1]["prompt"] == "[user] hi\n[assistant]"
    finally:
        s.stop()
    # --reasoning off: Qwen3's template gets enable_thinking false (an empty think block) unless the
    # request says otherwise; --reasoning-format is the requests' default (a bad value fails the start).
    s = Server(tmp_path / "off", "-np", "1", "-c", "512", "--reasoning", "off", "--reasoning-format", "none")
    try:
        assert s.post("/apply-template", hi)[1]["prompt"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        asked = dict(hi, chat_template_kwargs={"enable_thinking": True})
        assert not s.post("/apply-template", asked)[1]["prompt"].endswith("</think>\n\n")
    finally:
        s.stop()
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}")
    import subprocess
    from conftest import MODEL, _find_binary
    for args, why in (([ "--chat-template-file", str(bad)], "--chat-template-file"),
                      (["--chat-template-file", str(tmp_path / "missing.jinja")], "cannot read"),
                      (["--reasoning", "maybe"], "--reasoning must be"),
                      (["--reasoning-format", "loud"], "--reasoning-format must be")):
        r = subprocess.run([_find_binary(), "serve", "-m", MODEL, "--port", "0", *args], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and why in r.stderr + r.stdout, (args, r.stderr[-500:])


# Every field of a valid Anthropic / Responses request replaced in turn by values of the wrong
# type or shape: each answer is a 200 or a 400, never a 500 or a dead server.
ODD_VALUES = [None, 0, -1, "", [], {}, [{}], [{"type": "text", "text": 1}], [{"type": "tool_use"}], 10 ** 30]
ANTHROPIC_BODY = {
    "model": "m", "max_tokens": 2, "system": [{"type": "text", "text": "s"}], "stop_sequences": ["q"],
    "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto"},
    "thinking": {"type": "disabled"},
    "messages": [{"role": "user", "content": "hi"},
                 {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}]}
RESPONSES_BODY = {
    "model": "m", "max_output_tokens": 2, "instructions": "i", "tools": [{"type": "function", "name": "f"}],
    "tool_choice": "auto", "text": {"format": {"type": "text"}},
    "input": [{"role": "user", "content": "hi"}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
              {"type": "function_call_output", "call_id": "c", "output": "o"}]}


def field_paths(value, path=()):
    if path:
        yield path
    if isinstance(value, dict):
        for k in value:
            yield from field_paths(value[k], path + (k,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from field_paths(item, path + (i,))


def replaced(value, path, new):
    value = json.loads(json.dumps(value))
    node = value
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = new
    return value


@pytest.fixture(scope="module")
def mutation_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("mutations"), "-np", "2", "-c", "2048")
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


@pytest.mark.parametrize("path,body", [("/v1/messages", ANTHROPIC_BODY), ("/v1/messages/count_tokens", ANTHROPIC_BODY),
                                       ("/v1/responses", RESPONSES_BODY)])
def test_mutated_requests_are_200_or_400(mutation_server, path, body):
    server = mutation_server
    assert server.post(path, body)[0] == 200
    seen = set()
    for field in field_paths(body):
        for odd in ODD_VALUES:
            if field == ("max_output_tokens",) and odd is None:
                continue  # no limit: a long generation, not a bad request
            status, out = server.post(path, replaced(body, field, odd))
            assert status in (200, 400), (field, odd, out)
            seen.add(status)
    assert seen == {200, 400}
    assert server.proc.poll() is None


def test_llama_server_request_fields(tmp_path):
    """Fields llama.cpp's server suite uses: ignore_eos, response_fields, a prompt object, verbose;
    Anthropic responses carry no llama.cpp timings."""
    s = Server(tmp_path, "-np", "1")
    try:
        status, out = s.post("/completion", {"prompt": "Once upon a time", "n_predict": 8, "ignore_eos": True, "temperature": 0})
        assert status == 200, out
        bias = out["generation_settings"]["logit_bias"]
        assert bias and all(b["bias"] is None for b in bias) and out["generation_settings"]["ignore_eos"] is True
        assert out["tokens_predicted"] == 8
        status, out = s.post("/completion", {"prompt": "Once upon a time", "n_predict": 4})
        assert out["generation_settings"]["logit_bias"] == []

        status, out = s.post("/completion", {"prompt": "Hello", "n_predict": 5,
                                             "response_fields": ["content", "generation_settings/n_predict", "nothing/here"]})
        assert status == 200 and set(out) == {"content", "generation_settings/n_predict"}, out
        assert out["generation_settings/n_predict"] == 5

        text = s.post("/completion", {"prompt": "Hello", "n_predict": 3, "temperature": 0})[1]["content"]
        status, out = s.post("/completion", {"prompt": {"prompt_string": "Hello"}, "n_predict": 3, "temperature": 0})
        assert status == 200 and out["content"] == text
        for bad in ({"prompt_string": 3}, {"prompt_string": "a", "multimodal_data": ["x"]}, {"text": "a"}):
            assert s.post("/completion", {"prompt": bad, "n_predict": 1})[0] == 400, bad

        chat = {"messages": [{"role": "system", "content": "Book"}, {"role": "user", "content": "Hi"}], "max_tokens": 2}
        status, out = s.post("/v1/chat/completions", dict(chat, verbose=True))
        assert status == 200 and "Book" in out["__verbose"]["prompt"] and out["__verbose"]["tokens_predicted"] == 2
        assert "__verbose" not in s.post("/v1/chat/completions", chat)[1]

        status, out = s.post("/v1/messages", {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
        assert status == 200 and "timings" not in out and out["usage"]["output_tokens"] > 0

        # Assistant prefill: the answer continues a final assistant message (llama-server's default).
        base = [{"role": "user", "content": "Hi"}]
        plain = s.post("/apply-template", {"messages": base})[1]["prompt"]
        status, out = s.post("/apply-template", {"messages": base + [{"role": "assistant", "content": "Sure, here"}]})
        assert status == 200 and out["prompt"] == plain + "Sure, here", out
        status, out = s.post("/v1/chat/completions", {"messages": base + [{"role": "assistant", "content": "Sure"}],
                                                      "max_tokens": 3, "verbose": True})
        assert status == 200 and out["__verbose"]["prompt"].endswith("Sure"), out
        status, err = s.post("/v1/chat/completions", {"messages": base + [{"role": "assistant", "content": "a"},
                                                                         {"role": "assistant", "content": "b"}]})
        assert status == 400 and "2 or more assistant" in err["error"]["message"]
        status, out = s.post("/apply-template", {"messages": base + [{"role": "assistant", "content": "Sure"}],
                                                 "continue_final_message": True})
        assert status == 200 and out["prompt"] == plain + "Sure"
        for bad in ({"messages": base + [{"role": "assistant", "content": "x"}], "continue_final_message": True,
                     "add_generation_prompt": True}, {"messages": base, "continue_final_message": True}):
            assert s.post("/apply-template", bad)[0] == 400, bad
        # Draft 4's tuple form of "items" constrains each position.
        status, out = s.post("/v1/chat/completions", {"messages": base, "max_tokens": 12, "temperature": 0,
                                                      "response_format": {"type": "json_object",
                                                                          "schema": {"items": [{"type": "integer"}]}}})
        assert status == 200, out
        assert out["choices"][0]["message"]["content"].startswith("[")
    finally:
        s.stop()

    # --verbose: every OpenAI response carries __verbose unless the request says "verbose": false.
    s = Server(tmp_path / "verbose", "-np", "1", "--verbose")
    try:
        chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        assert "__verbose" in s.post("/v1/chat/completions", chat)[1]
        assert "__verbose" not in s.post("/v1/chat/completions", dict(chat, verbose=False))[1]
    finally:
        s.stop()
