"""Every endpoint's response shape, field by field, as llama-server writes it."""

import re

TIMINGS_KEYS = [
    "cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
    "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second",
]
USAGE_KEYS = ["completion_tokens", "prompt_tokens", "total_tokens", "prompt_tokens_details"]


def check_timings(t, prompt_n=None, cache_n=None, predicted_n=None):
    assert list(t.keys()) == TIMINGS_KEYS
    for key in TIMINGS_KEYS:
        assert isinstance(t[key], (int, float)) and t[key] >= 0, key
    if prompt_n is not None:
        assert t["prompt_n"] == prompt_n
    if cache_n is not None:
        assert t["cache_n"] == cache_n
    if predicted_n is not None:
        assert t["predicted_n"] == predicted_n


def test_health(server):
    assert server.get("/health") == (200, {"status": "ok"})
    assert server.get("/v1/health") == (200, {"status": "ok"})


def test_props(server):
    status, props = server.get("/props")
    assert status == 200
    for key in ["default_generation_settings", "total_slots", "model_alias", "model_path", "modalities",
                "chat_template", "bos_token", "eos_token", "build_info", "endpoint_slots", "endpoint_metrics"]:
        assert key in props, key
    assert props["total_slots"] == 4
    assert props["default_generation_settings"]["n_ctx"] == 4096
    # One shared memory: a request may use all of it (llama-server's n_ctx would be 4096 / 4).
    assert props["n_ctx_request"] == 4096 and props["n_ctx_pool"] == 4096
    params = props["default_generation_settings"]["params"]
    assert params["temperature"] == 0.800000011920929  # llama-server's default, a float
    assert params["top_k"] == 40 and params["n_predict"] == -1 and params["seed"] == 4294967295
    assert props["model_alias"] == "qwen3-micro.gguf"
    assert props["modalities"] == {"vision": False, "audio": False}
    assert "<|im_start|>" in props["chat_template"]  # Qwen3's template from the GGUF
    assert props["endpoint_metrics"] is True


def test_slots(server):
    slots = server.wait_all_idle()
    assert [s["id"] for s in slots] == [0, 1, 2, 3]
    for s in slots:
        for key in ["id", "id_task", "n_ctx", "speculative", "is_processing", "params", "prompt", "next_token",
                    "n_tokens_cached", "n_pages", "n_pages_cached", "n_pages_shared", "session_id"]:
            assert key in s, key
        assert s["n_ctx"] == 4096
        assert set(s["next_token"]) == {"has_next_token", "has_new_line", "n_remain", "n_decoded"}


def test_models(server):
    status, body = server.get("/v1/models")
    assert status == 200
    assert body["object"] == "list"
    model = body["data"][0]
    assert model["id"] == "qwen3-micro.gguf" and model["object"] == "model" and model["owned_by"] == "llamacpp"
    assert model["meta"]["n_vocab"] == 151936


def test_tokenize_matches_llama_cpp(server, reference):
    for case in reference:
        status, body = server.post("/tokenize", {"content": case["prompt"]})
        assert status == 200
        assert body == {"tokens": case["prompt_tokens"]}


def test_tokenize_with_pieces_and_detokenize(server, reference):
    case = reference[2]  # non-ASCII text: some pieces are partial UTF-8 and come as bytes
    status, body = server.post("/tokenize", {"content": case["prompt"], "with_pieces": True})
    assert status == 200
    assert [t["id"] for t in body["tokens"]] == case["prompt_tokens"]
    raw = b""
    for t in body["tokens"]:
        piece = t["piece"]
        raw += bytes(piece) if isinstance(piece, list) else piece.encode()
        if isinstance(piece, list):
            assert all(0 <= b < 256 for b in piece)
    assert raw.decode() == case["prompt"]
    assert any(isinstance(t["piece"], list) for t in body["tokens"])
    assert server.post("/detokenize", {"tokens": case["prompt_tokens"]}) == (200, {"content": case["prompt"]})
    assert server.post("/tokenize", {}) == (200, {"tokens": []})


def test_apply_template(server):
    status, body = server.post("/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 200
    assert body == {"prompt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"}
    # Content given as text parts is joined with newlines.
    status, body = server.post("/apply-template", {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": "q"}]})
    assert body["prompt"].startswith("<|im_start|>system\na\nb<|im_end|>\n")


def test_completion_matches_llama_cpp_greedy(server, reference):
    case = reference[0]
    status, body = server.post("/completion", {"prompt": case["prompt"], "n_predict": 16, "temperature": 0,
                                               "return_tokens": True, "cache_prompt": False})
    assert status == 200
    assert list(body.keys()) == ["index", "content", "tokens", "id_slot", "stop", "model", "tokens_predicted",
                                 "tokens_evaluated", "generation_settings", "prompt", "has_new_line", "truncated",
                                 "stop_type", "stopping_word", "tokens_cached", "timings"]
    assert body["tokens"] == case["generated"][:16]  # llama.cpp's greedy tokens
    assert body["content"] == server.post("/detokenize", {"tokens": body["tokens"]})[1]["content"]
    assert body["stop"] is True and body["stop_type"] == "limit" and body["truncated"] is False
    assert body["tokens_predicted"] == 16
    assert body["tokens_evaluated"] == len(case["prompt_tokens"])
    assert body["tokens_cached"] == len(case["prompt_tokens"]) + 15  # the last token is never evaluated
    assert body["prompt"] == case["prompt"]
    assert body["model"] == "qwen3-micro.gguf"
    assert body["generation_settings"]["n_predict"] == 16
    check_timings(body["timings"], prompt_n=len(case["prompt_tokens"]), cache_n=0, predicted_n=16)


def test_completion_stop_string(server, reference):
    case = reference[0]
    _, free = server.post("/completion", {"prompt": case["prompt"], "n_predict": 12, "temperature": 0,
                                          "repeat_penalty": 2.0})
    text = free["content"]
    assert len(text) > 4
    stop = text[3:5]
    _, stopped = server.post("/completion", {"prompt": case["prompt"], "n_predict": 12, "temperature": 0,
                                             "repeat_penalty": 2.0, "stop": [stop]})
    assert stopped["stop_type"] == "word"
    assert stopped["stopping_word"] == stop
    assert stopped["content"] == text[:text.index(stop)]


def test_completion_token_prompt_and_aliases(server, reference):
    case = reference[3]
    _, by_text = server.post("/completion", {"prompt": case["prompt"], "n_predict": 4, "temperature": 0})
    _, by_ids = server.post("/completions", {"prompt": case["prompt_tokens"], "max_tokens": 4, "temperature": 0})
    assert by_ids["content"] == by_text["content"]
    assert by_ids["tokens_evaluated"] == len(case["prompt_tokens"])
    assert by_ids["tokens_predicted"] == 4


def test_oai_completion(server, reference):
    status, body = server.post("/v1/completions", {"prompt": reference[1]["prompt"], "max_tokens": 5,
                                                   "temperature": 0, "model": "whatever"})
    assert status == 200
    assert list(body.keys()) == ["choices", "created", "model", "system_fingerprint", "object", "id", "usage",
                                 "timings"]
    assert body["object"] == "text_completion"
    assert body["model"] == "whatever"  # echoed as llama-server does
    assert re.fullmatch(r"cmpl-[A-Za-z0-9]{32}", body["id"])
    choice = body["choices"][0]
    assert list(choice.keys()) == ["text", "index", "logprobs", "finish_reason"]
    assert choice["finish_reason"] == "length" and choice["logprobs"] is None and choice["index"] == 0
    assert list(body["usage"].keys()) == USAGE_KEYS
    n_prompt = len(reference[1]["prompt_tokens"])
    assert body["usage"]["prompt_tokens"] == n_prompt
    assert body["usage"]["completion_tokens"] == 5
    assert body["usage"]["total_tokens"] == n_prompt + 5
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == body["timings"]["cache_n"]
    check_timings(body["timings"], predicted_n=5)


def test_oai_chat(server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a KV cache?"}]
    status, body = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 6, "temperature": 0})
    assert status == 200
    assert list(body.keys()) == ["choices", "created", "model", "system_fingerprint", "object", "usage", "id",
                                 "timings"]
    assert body["object"] == "chat.completion"
    assert re.fullmatch(r"chatcmpl-[A-Za-z0-9]{32}", body["id"])
    choice = body["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"] == "length"
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    # The prompt is the chat template's rendering, token for token.
    _, rendered = server.post("/apply-template", {"messages": messages})
    _, tokens = server.post("/tokenize", {"content": rendered["prompt"]})
    assert body["usage"]["prompt_tokens"] == len(tokens["tokens"])
    assert body["usage"]["completion_tokens"] == 6
    check_timings(body["timings"], predicted_n=6)
    # Same request through the native endpoint with the rendered prompt: same text.
    _, native = server.post("/completion", {"prompt": rendered["prompt"], "n_predict": 6, "temperature": 0})
    assert native["content"] == choice["message"]["content"]


def test_metrics(server):
    status, before = server.get("/metrics", raw=True)
    assert status == 200
    for name in ["prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total",
                 "tokens_predicted_seconds_total", "n_decode_total", "n_tokens_max", "n_busy_slots_per_decode",
                 "prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing", "requests_deferred"]:
        assert re.search(r"^# TYPE llamacpp:%s (counter|gauge)$" % name, before, re.M), name

    def value(text, name):
        return float(re.search(r"^llamacpp:%s (\S+)$" % name, text, re.M).group(1))

    server.post("/completion", {"prompt": "metrics", "n_predict": 3, "temperature": 0, "cache_prompt": False})
    _, after = server.get("/metrics", raw=True)
    assert value(after, "tokens_predicted_total") >= value(before, "tokens_predicted_total") + 3
    assert value(after, "n_decode_total") >= value(before, "n_decode_total") + 3
    assert value(after, "prompt_tokens_total") > value(before, "prompt_tokens_total")


def test_request_log_line(server):
    server.post("/completion", {"prompt": "log line", "n_predict": 1, "temperature": 0})
    assert re.search(r"request: POST /completion 200 prompt_n=\d+ cache_n=\d+ [\d.]+ ms", server.log())
    assert re.search(r"request: GET /health 200 [\d.]+ ms", server.log())
