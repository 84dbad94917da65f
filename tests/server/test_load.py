"""Load: 16 concurrent clients × 50 requests each, a mix of good requests (plain and streamed, on
the native and OpenAI endpoints), client cancels and bad requests, against one server.

Properties: the server never crashes; every good request gets a complete, well-formed answer;
every bad request gets a 4xx JSON error; afterwards /health is ok, every slot is idle, and a greedy
request still gives llama.cpp's tokens. Small n_predict and the micro model keep it well under a
minute on two cores.
"""

import json
import random
import socket
import threading
import time

from conftest import Server

N_CLIENTS = 16
N_REQUESTS = 50
N_PREDICT = 4
N_CTX = 4096

WORDS = "agent cache memory token slot prompt stream reuse state model answer tool call".split()

# (endpoint, body or raw bytes, expected status, expected error type): input every server must refuse.
BAD_REQUESTS = [
    ("/completion", b'{"prompt": "a", ', 400, "invalid_request_error"),
    ("/v1/chat/completions", b"[1, 2]", 400, "invalid_request_error"),
    ("/completion", {"prompt": "a", "n_predict": "5"}, 400, "invalid_request_error"),
    ("/completion", {"prompt": "a", "temperature": "hot"}, 400, "invalid_request_error"),
    ("/completion", {"prompt": ""}, 400, "invalid_request_error"),
    ("/completion", {"n_predict": 1}, 400, "invalid_request_error"),
    ("/completion", {"prompt": "a", "id_slot": 99}, 400, "invalid_request_error"),
    ("/completion", {"prompt": [1, 999999999]}, 400, "invalid_request_error"),
    ("/completion", {"prompt": [100] * (N_CTX + 10)}, 400, "exceed_context_size_error"),
    ("/v1/chat/completions", {"messages": []}, 400, "invalid_request_error"),
    ("/v1/chat/completions", {"messages": [{"content": "no role"}]}, 400, "invalid_request_error"),
    ("/v1/completions", {"prompt": "a", "stream": "yes"}, 400, "invalid_request_error"),
    ("/no-such-endpoint", {"prompt": "a"}, 404, "not_found_error"),
]


def _prompt(rng, reference):
    """A prompt that often shares a prefix with earlier ones (so the prompt cache is exercised)."""
    base = rng.choice(reference)["prompt"]
    return base + " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6)))


def _sse_events(text):
    events = []
    for block in text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            payload = block[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def _good_native(server, rng, reference):
    status, body = server.post("/completion", {"prompt": _prompt(rng, reference), "n_predict": N_PREDICT,
                                               "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 1000)})
    assert status == 200, body
    assert body["stop"] is True and body["stop_type"] in ("limit", "eos"), body
    assert 1 <= body["tokens_predicted"] <= N_PREDICT
    assert body["timings"]["cache_n"] + body["timings"]["prompt_n"] == body["tokens_evaluated"]


def _good_native_stream(server, rng, reference):
    status, _, events = server.stream("/completion", {"prompt": _prompt(rng, reference), "n_predict": N_PREDICT,
                                                      "temperature": 0, "stream": True})
    assert status == 200
    *partials, final = events
    assert all(ev["stop"] is False for ev in partials)
    assert final["stop"] is True and 1 <= final["tokens_predicted"] <= N_PREDICT, events
    # A token ending inside a UTF-8 character is sent with the next one: chunks <= tokens.
    assert 1 <= len(partials) <= final["tokens_predicted"], events


def _good_chat(server, rng, reference):
    messages = [{"role": "user", "content": _prompt(rng, reference)}]
    status, body = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": N_PREDICT,
                                                        "temperature": 0})
    assert status == 200, body
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["finish_reason"] in ("length", "stop")
    assert 1 <= body["usage"]["completion_tokens"] <= N_PREDICT


def _good_chat_stream(server, rng, reference):
    messages = [{"role": "user", "content": _prompt(rng, reference)}]
    status, _, events = server.stream("/v1/chat/completions", {"messages": messages, "max_tokens": N_PREDICT,
                                                               "temperature": 0, "stream": True})
    assert status == 200
    assert events[-1] == "[DONE]", events
    assert events[-2]["choices"][0]["finish_reason"] in ("length", "stop"), events


def _good_oai_completion(server, rng, reference):
    status, body = server.post("/v1/completions", {"prompt": _prompt(rng, reference), "max_tokens": N_PREDICT,
                                                   "temperature": 0})
    assert status == 200, body
    assert body["object"] == "text_completion"
    assert body["usage"]["completion_tokens"] >= 1


def _cancel(server, rng, reference):
    """A long request whose client goes away: mid-stream, or before a plain answer is ready."""
    stream = rng.random() < 0.5
    body = json.dumps({"prompt": _prompt(rng, reference), "n_predict": 100000, "temperature": 0,
                       "stream": stream}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        sock.sendall(b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        if stream:
            received = b""
            while b"data: " not in received:
                chunk = sock.recv(4096)
                assert chunk, "the server closed a stream before its first event"
                received += chunk
            assert received.startswith(b"HTTP/1.1 200")
        else:
            time.sleep(rng.uniform(0.0, 0.05))
    finally:
        sock.close()


def _bad(server, rng, _reference):
    path, body, code, type_ = rng.choice(BAD_REQUESTS)
    status, answer = server.post(path, body)
    assert status == code, (path, body if isinstance(body, bytes) else json.dumps(body)[:80], status, answer)
    assert 400 <= status < 500
    assert answer["error"]["code"] == code and answer["error"]["type"] == type_, answer


# Kind → (share of the requests, function). Cancels and bad requests are a quarter each at most.
MIX = [
    ("native", 0.20, _good_native),
    ("native_stream", 0.15, _good_native_stream),
    ("chat", 0.12, _good_chat),
    ("chat_stream", 0.12, _good_chat_stream),
    ("oai_completion", 0.08, _good_oai_completion),
    ("cancel", 0.08, _cancel),
    ("bad", 0.25, _bad),
]


def test_sixteen_clients_mixed_load(tmp_path, reference):
    server = Server(tmp_path, "-np", "4", "-c", str(N_CTX), "--threads-http", "32")
    try:
        kinds = [k for k, _, _ in MIX]
        weights = [w for _, w, _ in MIX]
        handlers = {k: f for k, _, f in MIX}
        failures = []
        counts = {k: 0 for k in kinds}
        lock = threading.Lock()

        def client(index):
            rng = random.Random(1000 + index)
            for n in range(N_REQUESTS):
                kind = rng.choices(kinds, weights)[0]
                try:
                    handlers[kind](server, rng, reference)
                except Exception as e:  # collected: one failure must not hide the others
                    with lock:
                        failures.append("client %d request %d (%s): %r" % (index, n, kind, e))
                with lock:
                    counts[kind] += 1

        start = time.time()
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(N_CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(1.0, 150 - (time.time() - start)))
        elapsed = time.time() - start
        assert not any(t.is_alive() for t in threads), "clients still running after %.0f s" % elapsed
        assert not failures, "%d failures, first ones:\n%s" % (len(failures), "\n".join(failures[:10]))
        assert sum(counts.values()) == N_CLIENTS * N_REQUESTS
        assert all(counts[k] > 0 for k in kinds), counts
        assert server.proc.poll() is None, "the server died under load:\n" + server.log()[-4000:]

        # Healthy afterwards: every slot idle, /health ok, and greedy output still llama.cpp's.
        slots = server.wait_all_idle(timeout=15)
        assert len(slots) == 4 and all(s["is_processing"] is False for s in slots)
        assert server.get("/health") == (200, {"status": "ok"})
        case = reference[0]
        status, body = server.post("/completion", {"prompt": case["prompt"], "n_predict": 12, "temperature": 0,
                                                   "return_tokens": True})
        assert status == 200
        assert body["tokens"] == case["generated"][:12]
        assert "cancelled (client disconnected)" in server.log()
        print("load: %d requests in %.1f s, %s" % (N_CLIENTS * N_REQUESTS, elapsed, counts))
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()[-4000:]
