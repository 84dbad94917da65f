"""Streaming (Server-Sent Events) on the three completion endpoints, and client disconnects."""

import json
import socket
import time

from test_endpoints import TIMINGS_KEYS
from conftest import Server

BODY = {"n_predict": 10, "max_tokens": 10, "temperature": 0, "repeat_penalty": 2.0}


def test_native_stream(server, reference):
    prompt = reference[0]["prompt"]
    _, whole = server.post("/completion", {"prompt": prompt, **BODY})
    status, ctype, events = server.stream("/completion", {"prompt": prompt, "stream": True, **BODY})
    assert status == 200 and ctype.startswith("text/event-stream")
    assert "[DONE]" not in events  # the native API ends with its final object, not [DONE]
    *partials, final = events
    assert partials
    for ev in partials:
        assert list(ev.keys()) == ["index", "content", "tokens", "stop", "id_slot", "tokens_predicted",
                                   "tokens_evaluated"]
        assert ev["stop"] is False
    assert [ev["tokens_predicted"] for ev in partials] == sorted(ev["tokens_predicted"] for ev in partials)
    assert "".join(ev["content"] for ev in partials) == whole["content"]
    assert final["stop"] is True and final["content"] == "" and final["tokens"] == []
    assert final["tokens_predicted"] == 10 and final["stop_type"] == "limit"
    assert list(final["timings"].keys()) == TIMINGS_KEYS


def test_native_stream_timings_per_token_and_tokens(server):
    _, _, events = server.stream("/completion", {"prompt": "Hello", "stream": True, "timings_per_token": True,
                                                 "return_tokens": True, **BODY})
    for ev in events[:-1]:
        assert list(ev["timings"].keys()) == TIMINGS_KEYS
        assert len(ev["tokens"]) == 1


def test_a_stream_carries_every_token_id_even_while_text_is_held_back(server, reference):
    """Token ids go out with the event that releases their text: none is lost while a stop string
    is pending (text held back) or a token's text is empty; the final event carries what is left."""
    prompt = reference[0]["prompt"]
    body = {"prompt": prompt, **BODY, "n_predict": 16, "return_tokens": True}
    _, plain = server.post("/completion", body)
    _, _, pieces = server.stream("/completion", {**body, "stream": True})
    # A stop string that starts with the third token's text but never matches: that text is held
    # back until the next token shows it is not the stop string.
    stop = pieces[2]["content"] + "\u0001"
    _, whole = server.post("/completion", {**body, "stop": [stop]})
    assert whole["tokens"] == plain["tokens"]
    _, _, events = server.stream("/completion", {**body, "stop": [stop], "stream": True})
    streamed = [t for ev in events for t in ev["tokens"]]
    assert streamed == whole["tokens"], events
    assert any(len(ev["tokens"]) > 1 for ev in events), events  # text was held back at least once
    assert "".join(ev["content"] for ev in events) == whole["content"]


def test_oai_completion_stream(server, reference):
    prompt = reference[3]["prompt"]
    _, whole = server.post("/v1/completions", {"prompt": prompt, **BODY})
    status, _, events = server.stream("/v1/completions", {"prompt": prompt, "stream": True, **BODY})
    assert status == 200
    assert events[-1] == "[DONE]"
    *chunks, final = events[:-1]
    for c in chunks:
        assert c["object"] == "text_completion"
        assert c["choices"][0]["finish_reason"] is None
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert final["choices"][0]["finish_reason"] == "length"
    assert final["usage"]["completion_tokens"] == 10
    assert list(final["timings"].keys()) == TIMINGS_KEYS


def test_chat_stream(server):
    body = {"messages": [{"role": "user", "content": "Count to three."}], **BODY}
    _, whole = server.post("/v1/chat/completions", body)
    status, _, events = server.stream("/v1/chat/completions",
                                      {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    for c in chunks:
        assert c["object"] == "chat.completion.chunk"
        assert list(c.keys())[:6] == ["choices", "created", "id", "model", "system_fingerprint", "object"]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    deltas = [c["choices"][0]["delta"] for c in chunks[1:-2]]
    assert all(list(d.keys()) == ["content"] for d in deltas)
    assert "".join(d["content"] for d in deltas) == whole["choices"][0]["message"]["content"]
    finish, usage = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "length" and finish["choices"][0]["delta"] == {}
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 10
    assert list(usage["timings"].keys()) == TIMINGS_KEYS


def _raw_request(server, path, body):
    sock = socket.create_connection(("127.0.0.1", server.port))
    data = json.dumps(body).encode()
    sock.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                 % (path.encode(), len(data)) + data)
    return sock


def _busy(server):
    return any(s["is_processing"] for s in server.get("/slots")[1])


def test_stream_disconnect_frees_the_slot(server):
    server.wait_all_idle()
    sock = _raw_request(server, "/completion", {"prompt": "Go on forever", "n_predict": 100000, "stream": True,
                                                "temperature": 0})
    received = b""
    while b"data: " not in received:
        received += sock.recv(4096)
    assert _busy(server)
    sock.close()
    server.wait_all_idle(timeout=10)
    assert "cancelled (client disconnected)" in server.log()


def test_non_stream_disconnect_frees_the_slot(server):
    server.wait_all_idle()
    sock = _raw_request(server, "/completion", {"prompt": "Keep going", "n_predict": 100000, "temperature": 0})
    deadline = time.time() + 10
    while not _busy(server):
        assert time.time() < deadline
        time.sleep(0.02)
    sock.close()
    server.wait_all_idle(timeout=10)
    # The freed slot serves the next request normally.
    status, body = server.post("/completion", {"prompt": "after", "n_predict": 2, "temperature": 0})
    assert status == 200 and body["tokens_predicted"] == 2


def test_return_progress(tmp_path):
    """llama-server's return_progress: prompt_progress chunks while the prompt is read (one per
    batch of -ub tokens, the first one with processed == cache), in native and OpenAI streams;
    a second turn's first report counts the tokens it reused."""
    s = Server(tmp_path, "-np", "1", "-c", "1024", "-ub", "64")
    try:
        messages = [{"role": "user", "content": "This is a test " * 40}]

        def reports(path, body):
            status, _, events = s.stream(path, dict(body, stream=True, return_progress=True, max_tokens=4))
            assert status == 200
            progress = [e["prompt_progress"] for e in events if isinstance(e, dict) and "prompt_progress" in e]
            assert progress and all(p.keys() == {"total", "cache", "processed", "time_ms"} for p in progress)
            assert progress[0]["processed"] == progress[0]["cache"]
            assert progress[-1]["processed"] == progress[-1]["total"]
            assert all(b["processed"] > a["processed"] for a, b in zip(progress, progress[1:]))
            assert len({(p["total"], p["cache"]) for p in progress}) == 1
            return progress

        first = reports("/v1/chat/completions", {"messages": messages})
        assert first[0]["cache"] == 0 and len(first) == 1 + -(-first[0]["total"] // 64)
        again = reports("/v1/chat/completions", {"messages": messages + [{"role": "assistant", "content": "ok"},
                                                                        {"role": "user", "content": "more"}]})
        assert again[0]["cache"] > 0
        native = reports("/completion", {"prompt": "Hello " * 100, "n_predict": 2})
        assert len(native) >= 2
        # Without it, no such chunk.
        _, _, events = s.stream("/v1/chat/completions", {"messages": messages, "stream": True, "max_tokens": 2})
        assert not any(isinstance(e, dict) and "prompt_progress" in e for e in events)
    finally:
        s.stop()
