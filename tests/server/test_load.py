"""Load and faults: 16 concurrent clients × 50 requests each, a mix of good requests (plain and
streamed, on the native and OpenAI endpoints), client cancels, bad requests (malformed, wrong types,
deep nesting, number overflow, foreign origins and hosts, non-JSON types, bad framing, chunked
bodies over the limit) and slow clients, against one server.

Properties: the server never crashes; every good request gets a complete, well-formed answer, and
every greedy one the same text as in a quiet run of the same prompt before the load; every bad
request gets a 4xx JSON error; afterwards /health is ok, every slot is idle, and a greedy request
still gives llama.cpp's tokens. Small n_predict and the micro model keep it under a minute on two
cores (CI bound: 90 s).
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
MAX_BODY = 200_000
DEEP = "[" * 52_000 + "]" * 52_000

WORDS = "agent cache memory token slot prompt stream reuse state model answer tool call".split()

# (endpoint, body or raw bytes, expected status, expected error type[, headers]): input every server
# must refuse.
BAD_REQUESTS = [
    ("/v1/chat/completions", ('{"max_tokens":2,"messages":[{"role":"user","content":"hi","x":%s}]}' % DEEP).encode(),
     400, "invalid_request_error"),
    ("/apply-template", ('{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"a":%s}}' % DEEP)
     .encode(), 400, "invalid_request_error"),
    ("/completion", b'{"prompt":"a","temperature":1e400}', 400, "invalid_request_error"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": 5, "text": "a"}]}]}, 400,
     "invalid_request_error"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": None}]}]}, 400,
     "invalid_request_error"),
    ("/completion", {"prompt": "a"}, 415, "invalid_request_error", {"Content-Type": "text/plain"}),
    ("/completion", {"prompt": "a"}, 403, "permission_error", {"Origin": "http://evil.example"}),
    ("/completion", {"prompt": "a"}, 403, "permission_error", {"Host": "rebind.evil.example"}),
    ("/completion", {"prompt": "x" * (MAX_BODY + 10)}, 413, "invalid_request_error"),
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


# Greedy answers of a quiet server (no other request running), per prompt: what every greedy
# request under load must reproduce. Filled by the test before the load starts.
QUIET = {"native": {}, "chat": {}}
N_POOL = 24


def _pool_prompt(rng, reference):
    return _prompt(random.Random(rng.randrange(N_POOL)), reference)


def _quiet_runs(server, reference):
    for i in range(N_POOL):
        prompt = _prompt(random.Random(i), reference)
        status, body = server.post("/completion", {"prompt": prompt, "n_predict": N_PREDICT, "temperature": 0})
        assert status == 200, body
        QUIET["native"][prompt] = body["content"]
        status, body = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                                            "max_tokens": N_PREDICT, "temperature": 0})
        assert status == 200, body
        QUIET["chat"][prompt] = body["choices"][0]["message"]["content"]


def _good_native(server, rng, reference):
    greedy = rng.random() < 0.5
    prompt = _pool_prompt(rng, reference) if greedy else _prompt(rng, reference)
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": N_PREDICT,
                                               "temperature": 0 if greedy else 0.8, "seed": rng.randint(0, 1000)})
    assert status == 200, body
    assert body["stop"] is True and body["stop_type"] in ("limit", "eos"), body
    assert 1 <= body["tokens_predicted"] <= N_PREDICT
    assert body["timings"]["cache_n"] + body["timings"]["prompt_n"] == body["tokens_evaluated"]
    if greedy:
        assert body["content"] == QUIET["native"][prompt], (prompt, body["content"])


def _good_native_stream(server, rng, reference):
    prompt = _pool_prompt(rng, reference)
    status, _, events = server.stream("/completion", {"prompt": prompt, "n_predict": N_PREDICT,
                                                      "temperature": 0, "stream": True})
    assert status == 200
    *partials, final = events
    assert all(ev["stop"] is False for ev in partials)
    assert final["stop"] is True and 1 <= final["tokens_predicted"] <= N_PREDICT, events
    # A token ending inside a UTF-8 character is sent with the next one: chunks <= tokens.
    assert 1 <= len(partials) <= final["tokens_predicted"], events
    assert "".join(ev["content"] for ev in partials) == QUIET["native"][prompt]


def _good_chat(server, rng, reference):
    prompt = _pool_prompt(rng, reference)
    status, body = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                                        "max_tokens": N_PREDICT, "temperature": 0})
    assert status == 200, body
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["finish_reason"] in ("length", "stop")
    assert 1 <= body["usage"]["completion_tokens"] <= N_PREDICT
    assert body["choices"][0]["message"]["content"] == QUIET["chat"][prompt]


def _good_chat_stream(server, rng, reference):
    prompt = _pool_prompt(rng, reference)
    status, _, events = server.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                                               "max_tokens": N_PREDICT, "temperature": 0,
                                                               "stream": True})
    assert status == 200
    assert events[-1] == "[DONE]", events
    assert events[-2]["choices"][0]["finish_reason"] in ("length", "stop"), events
    text = "".join(ev["choices"][0]["delta"].get("content") or "" for ev in events[:-1] if ev["choices"])
    assert text == QUIET["chat"][prompt]


def _good_oai_completion(server, rng, reference):
    prompt = _pool_prompt(rng, reference)
    status, body = server.post("/v1/completions", {"prompt": prompt, "max_tokens": N_PREDICT, "temperature": 0})
    assert status == 200, body
    assert body["object"] == "text_completion"
    assert body["usage"]["completion_tokens"] >= 1
    assert body["choices"][0]["text"] == QUIET["native"][prompt]


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
    path, body, code, type_, *headers = rng.choice(BAD_REQUESTS)
    status, answer = server.post(path, body, headers=headers[0] if headers else None)
    assert status == code, (path, body[:80] if isinstance(body, bytes) else json.dumps(body)[:80], status, answer)
    assert 400 <= status < 500
    assert answer["error"]["code"] == code and answer["error"]["type"] == type_, answer


def _bad_framing(server, rng, _reference):
    """Raw requests the HTTP layer must refuse: bad lengths at once, chunked bodies over the limit."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        head = b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        if rng.random() < 0.5:
            sock.sendall(head + rng.choice([b"Content-Length: -5", b"Content-Length: 1e3",
                                            b"Content-Length: 3\r\nTransfer-Encoding: chunked"]) + b"\r\n\r\n")
            expected = b"HTTP/1.1 400"
        else:
            sock.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
            piece = b"x" * 65536
            try:
                for _ in range(2 * MAX_BODY // len(piece) + 2):
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            except (BrokenPipeError, ConnectionResetError):
                pass
            expected = b"HTTP/1.1 413"
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(4096)
            assert chunk, "connection closed without an answer"
            received += chunk
        assert received.startswith(expected), received[:100]
    finally:
        sock.close()


def _slow(server, rng, _reference):
    """A client that sends its request head a few bytes at a time and gives up midway."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        for part in (b"POST /comp", b"letion HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n"):
            sock.sendall(part)
            time.sleep(rng.uniform(0.0, 0.1))
    finally:
        sock.close()


# Kind → (share of the requests, function). Cancels and bad requests are a quarter each at most.
MIX = [
    ("native", 0.20, _good_native),
    ("native_stream", 0.15, _good_native_stream),
    ("chat", 0.12, _good_chat),
    ("chat_stream", 0.12, _good_chat_stream),
    ("oai_completion", 0.08, _good_oai_completion),
    ("cancel", 0.08, _cancel),
    ("bad", 0.19, _bad),
    ("bad_framing", 0.04, _bad_framing),
    ("slow", 0.02, _slow),
]


def test_sixteen_clients_mixed_load(tmp_path, reference):
    # Batch-invariant numerics: a greedy answer may not depend on what else shared its batches or
    # how much of its prompt came from cached pages (agentkv/numerics.h).
    server = Server(tmp_path, "-np", "4", "-c", str(N_CTX), "--threads-http", "64", "--max-body", str(MAX_BODY),
                    "--batch-invariant")
    try:
        _quiet_runs(server, reference)
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
