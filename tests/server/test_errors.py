"""Bad input gets a 4xx JSON error shaped as llama-server's, never a crash, and leaves slots healthy."""

import http.client
import json

import pytest

from conftest import Server


def assert_error(response, code, type_, message_part=None):
    status, body = response
    assert status == code, body
    assert list(body.keys()) == ["error"], body
    err = body["error"]
    assert list(err.keys())[:3] == ["code", "message", "type"]
    assert err["code"] == code and err["type"] == type_
    if message_part is not None:
        assert message_part in err["message"], err["message"]
    return err


def test_malformed_json(server):
    assert_error(server.post("/completion", b'{"prompt": "a", '), 400, "invalid_request_error", "invalid JSON")
    assert_error(server.post("/v1/chat/completions", b"[1, 2]"), 400, "invalid_request_error", "JSON object")
    assert_error(server.post("/tokenize", b"not json"), 400, "invalid_request_error")


def test_wrong_field_types(server):
    assert_error(server.post("/completion", {"prompt": "a", "temperature": "hot"}), 400, "invalid_request_error",
                 "'temperature'")
    assert_error(server.post("/completion", {"prompt": "a", "n_predict": "5"}), 400, "invalid_request_error",
                 "'n_predict'")
    assert_error(server.post("/completion", {"prompt": "a", "stream": "yes"}), 400, "invalid_request_error", "'stream'")
    assert_error(server.post("/completion", {"prompt": {"text": "a"}}), 400, "invalid_request_error", "'prompt'")
    assert_error(server.post("/completion", {"prompt": [[1, 2], True]}), 400, "invalid_request_error", "prompt")
    assert_error(server.post("/completion", {"prompt": [1, 999999999]}), 400, "invalid_request_error", "out of range")
    assert_error(server.post("/v1/chat/completions", {"messages": "hi"}), 400, "invalid_request_error", "'messages'")
    assert_error(server.post("/v1/chat/completions", {"messages": [{"content": "no role"}]}), 400,
                 "invalid_request_error", "role")
    assert_error(server.post("/detokenize", {"tokens": ["a"]}), 400, "invalid_request_error")
    # A field of a JSON type nobody checked for used to escape as nlohmann's type_error (found by
    # request_fuzz): each is a 400 naming the field.
    assert_error(server.post("/v1/chat/completions", {"messages": [{"role": {"type": "object"}}]}), 400,
                 "invalid_request_error", "role")
    hi = [{"role": "user", "content": "hi"}]
    assert_error(server.post("/v1/chat/completions", {"messages": hi, "response_format": {"type": [1]}}), 400,
                 "invalid_request_error", "'type'")
    assert_error(server.post("/v1/chat/completions", {"messages": hi, "tool_choice": {"type": 7}}), 400,
                 "invalid_request_error", "'type'")
    string_param = {"type": "object", "properties": {"a": {"type": "string", "minLength": "3"}}}
    assert_error(server.post("/v1/chat/completions", {"messages": hi, "tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": "f", "parameters": string_param}}]}), 400, "invalid_request_error")
    assert_error(server.post("/completion", {"prompt": "a", "repeat_penalty": 0}), 400, "invalid_request_error")


def test_missing_or_empty_prompt(server):
    assert_error(server.post("/completion", {"n_predict": 1}), 400, "invalid_request_error", "'prompt' is required")
    assert_error(server.post("/completion", {"prompt": ""}), 400, "invalid_request_error", "empty")
    assert_error(server.post("/v1/chat/completions", {"messages": []}), 400, "invalid_request_error")


def test_unknown_slot(server):
    assert_error(server.post("/completion", {"prompt": "a", "id_slot": 4}), 400, "invalid_request_error", "id_slot 4")
    assert_error(server.post("/completion", {"prompt": "a", "id_slot": -7}), 400, "invalid_request_error")


def test_prompt_longer_than_the_context(server):
    err = assert_error(server.post("/completion", {"prompt": [100] * 5000}), 400, "exceed_context_size_error",
                       "exceeds the available context size")
    assert err["n_prompt_tokens"] == 5000 and err["n_ctx"] == 4096
    assert_error(server.post("/completion", {"prompt": [100] * 4096}), 400, "exceed_context_size_error")


def test_body_too_large(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    body = json.dumps({"prompt": "x" * 1_200_000}).encode()
    try:
        conn.request("POST", "/completion", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        status, payload = resp.status, json.loads(resp.read())
    except (BrokenPipeError, ConnectionResetError):
        pytest.fail("the server closed the connection without an answer")
    finally:
        conn.close()
    assert_error((status, payload), 413, "invalid_request_error", "too large")


def test_unknown_endpoint(server):
    assert_error(server.get("/nope"), 404, "not_found_error")


def test_slots_stay_healthy_after_bad_input(server):
    slots = server.wait_all_idle()
    assert len(slots) == 4
    status, body = server.post("/completion", {"prompt": "still fine", "n_predict": 3, "temperature": 0})
    assert status == 200 and body["tokens_predicted"] == 3
    assert server.proc.poll() is None


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("keyed"), "-np", "1", "-c", "512", "--api-key", "sesame")
    yield s
    s.stop()


def test_api_key(keyed):
    assert keyed.get("/health") == (200, {"status": "ok"})  # /health needs no key
    for path in ["/models", "/v1/models"]:  # nor the model list (llama-server's public endpoints)
        assert keyed.get(path)[0] == 200
    for path in ["/props", "/slots", "/metrics"]:
        assert_error(keyed.get(path), 401, "authentication_error", "Invalid API Key")
    assert_error(keyed.post("/completion", {"prompt": "a"}), 401, "authentication_error")
    assert_error(keyed.get("/props", headers={"Authorization": "Bearer wrong"}), 401, "authentication_error")
    assert keyed.get("/props", headers={"Authorization": "Bearer sesame"})[0] == 200
    assert keyed.get("/props", headers={"X-Api-Key": "sesame"})[0] == 200
    status, body = keyed.post("/completion", {"prompt": "a", "n_predict": 1},
                              headers={"Authorization": "Bearer sesame"})
    assert status == 200 and body["tokens_predicted"] == 1


def test_metrics_need_the_flag(keyed):
    assert_error(keyed.get("/metrics", headers={"Authorization": "Bearer sesame"}), 501, "not_supported_error",
                 "--metrics")


def test_startup_failures_exit_with_a_message(tmp_path):
    import subprocess
    from conftest import _find_binary

    missing = subprocess.run([_find_binary(), "serve", "-m", str(tmp_path / "missing.gguf"), "--port", "0"],
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1
    assert "cannot load the model" in missing.stderr
    bad_flag = subprocess.run([_find_binary(), "serve", "-m", "x.gguf", "--bogus"], capture_output=True, text=True,
                              timeout=30)
    assert bad_flag.returncode == 1 and "unknown argument '--bogus'" in bad_flag.stderr
    bad_type = subprocess.run([_find_binary(), "serve", "-m", "x.gguf", "-ctk", "q6_K"], capture_output=True,
                              text=True, timeout=30)
    assert bad_type.returncode == 1 and "unsupported cache type" in bad_type.stderr
    for args, message in ((["--cache-warm-type", "q8_0"], "--cache-warm-type q8_0 needs --cache-warm MiB"),
                          (["--cache-warm", "8", "--cache-warm-type", "q5"], "exact, q8_0 or q4_0, not 'q5'"),
                          (["--cache-warm", "-1"], "--cache-warm must be in")):
        refused = subprocess.run([_find_binary(), "serve", "-m", "x.gguf", *args], capture_output=True, text=True,
                                 timeout=30)
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr
