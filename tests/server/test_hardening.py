"""Server hardening (issue 14, docs/security.md): each test replays one of the probe's requests.

1 deep JSON nesting, 2 chunked / compressed bodies over --max-body, 3 client mistakes that were
500s, 4 slow clients, 5 concurrent saves to one name, 6 restore under memory pressure, 7 the save
folder, 8 privacy (slots, paths, browsers, cache_salt), 9 a negative Content-Length.
"""

import base64
import gzip
import json
import os
import socket
import struct
import threading
import time

import pytest

from conftest import Server

DEPTH = 52_000  # about 105 KB: the size that crashed the server


def nested(depth=DEPTH):
    return "[" * depth + "]" * depth


def raw_body(obj_text):
    return obj_text.encode()


def assert_4xx(response, code=None):
    status, body = response
    assert 400 <= status < 500, (status, body)
    if code is not None:
        assert status == code, (status, body)
    assert isinstance(body, dict) and "error" in body, body
    assert body["error"]["code"] == status, body
    return body["error"]["message"]


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def raw_request(port, data, timeout=10, read_all=True):
    """Sends raw bytes; returns (status line + headers, body bytes) of the answer."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(data)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
            if not read_all and b"\r\n\r\n" in received:
                break
        head, _, body = received.partition(b"\r\n\r\n")
        return head.decode("latin-1"), body
    finally:
        sock.close()


# ---- 1: nesting --------------------------------------------------------------------------------

DEEP_CASES = [
    ("/v1/chat/completions", '{"max_tokens":2,"messages":[{"role":"user","content":"hi","x":%s}]}'),
    ("/v1/chat/completions", '{"max_tokens":2,"messages":[{"role":"user","content":%s}]}'),
    ("/v1/chat/completions", '{"max_tokens":2,"messages":[{"role":"user","content":"hi"}],"tools":%s}'),
    ("/v1/chat/completions", '{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"a","x":%s}]}]}'),
    ("/apply-template", '{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"a":%s}}'),
    ("/apply-template", '{"messages":[{"role":"user","content":"hi"}],"tools":[%s]}'),
    ("/v1/prefill", '{"messages":[{"role":"user","content":"hi","x":%s}]}'),
    ("/v1/prefill", '{"messages":%s}'),
    ("/completion", '{"prompt":%s}'),
    ("/completion", '{"prompt":"a","logit_bias":%s}'),
    ("/tokenize", '{"content":%s}'),
    ("/detokenize", '{"tokens":%s}'),
    ("/slots/0?action=erase", '{"x":%s}'),
]


@pytest.mark.parametrize("depth", [DEPTH, 400_000])  # the probe's size, and one far beyond any stack
@pytest.mark.parametrize("path,template", DEEP_CASES)
def test_deep_nesting_is_refused_before_any_copy(server, path, template, depth):
    message = assert_4xx(server.post(path, raw_body(template % nested(depth))), 400)
    assert "nested too deeply" in message
    assert server.proc.poll() is None, server.log()[-2000:]


def test_nesting_at_the_limit_still_works(server):
    # 250 levels inside a message key: accepted by the body check, and by the template (256 per value).
    body = '{"messages":[{"role":"user","content":"hi","x":%s}]}' % nested(250)
    status, answer = server.post("/apply-template", raw_body(body))
    assert status == 200, answer
    assert_4xx(server.post("/apply-template", raw_body(body.replace(nested(250), nested(300)))), 400)


def test_deep_nesting_from_a_foreign_page_is_refused(server):
    body = raw_body(DEEP_CASES[0][1] % nested())
    for headers in [{"Content-Type": "text/plain"}, {"Content-Type": "text/plain", "Origin": "http://evil.example"}]:
        status, answer = server.post("/v1/chat/completions", body, headers=headers)
        assert status in (403, 415), (status, answer)
    assert server.proc.poll() is None


# ---- 2: body limits for every transfer encoding --------------------------------------------------

def _send_chunked(port, total, chunk=1 << 16, headers=b""):
    """Streams a chunked JSON body of `total` bytes; returns the answer's status line."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    answer = {}

    def reader():
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                part = sock.recv(4096)
                if not part:
                    break
                data += part
        except OSError:
            pass
        answer["head"] = data.split(b"\r\n", 1)[0].decode("latin-1")

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        sock.sendall(b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n" + headers + b"\r\n")
        sent = 0
        piece = b'{"prompt":"' + b"x" * (chunk - 11)
        while sent < total and t.is_alive():
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
            piece = b"x" * chunk
        if t.is_alive():
            sock.sendall(b'3\r\n"}\n\r\n0\r\n\r\n')
    except (BrokenPipeError, ConnectionResetError):
        pass
    t.join(timeout=30)
    sock.close()
    return answer.get("head", "")


def test_chunked_body_over_max_body_is_413(server):
    # The shared server's --max-body is 1,000,000: a 64 MiB chunked body must not be buffered.
    before = rss_kib(server.proc.pid)
    head = _send_chunked(server.port, 64 << 20)
    assert head.startswith("HTTP/1.1 413"), head
    assert rss_kib(server.proc.pid) - before < 40_000
    # Under the limit, chunked still works.
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    body = json.dumps({"prompt": "hello", "n_predict": 1}).encode()
    sock.sendall(b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    data = b""
    while True:
        part = sock.recv(65536)
        if not part:
            break
        data += part
    sock.close()
    assert data.startswith(b"HTTP/1.1 200"), data[:200]


def test_compressed_body_is_limited_after_decompression(server):
    payload = gzip.compress(json.dumps({"prompt": "x" * 3_000_000}).encode())
    assert len(payload) < 1_000_000
    status, answer = server.post("/completion", payload, headers={"Content-Encoding": "gzip"})
    assert status == 413, answer


def test_bodies_of_unknown_routes_and_methods_are_not_read(server):
    head = _send_chunked(server.port, 8 << 20).split(" ")
    assert head[1] == "413"
    head, _ = raw_request(server.port, b"PUT /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked"
                                       b"\r\n\r\n")
    assert head.startswith("HTTP/1.1 405"), head
    head, _ = raw_request(server.port, b"POST /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                                       b"\r\nContent-Length: 5\r\n\r\n{}{}{")
    assert head.startswith("HTTP/1.1 404"), head


# ---- 3: client mistakes are 4xx ------------------------------------------------------------------

MISTAKES = [
    ("/completion", '{"prompt":"a","temperature":1e400}'),
    ("/completion", '{"prompt":"a","n_predict":1e400}'),
    ("/completion", '{"prompt":"a","seed":-1e400}'),
    ("/completion", '{"prompt":[1e400]}'),
    ("/completion", '{"prompt":"a","logit_bias":{"1":1e400}}'),
    ("/completion", '{"prompt":"a","id_slot":18446744073709551616}'),
    ("/completion", '{"prompt":"a","stop":[1]}'),
    ("/completion", '{"prompt":"a","stream_options":5}'),
    ("/completion", '{"prompt":"a","cache_salt":5}'),
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":[{"type":5,"text":"a"}]}]}'),
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":[{"type":null,"text":"a"}]}]}'),
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}'),
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":[5]}]}'),
    ("/v1/chat/completions", '{"messages":[{"role":5,"content":"a"}]}'),
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":5}]}'),
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":"a"}],"tools":{}}'),
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":[]}'),
    ("/v1/chat/completions", '{"messages":[{"role":"user","content":"a"}],"max_tokens":1e400}'),
    ("/apply-template", '{"messages":[{"role":"user","content":"a"}],"add_generation_prompt":"yes"}'),
    ("/tokenize", '{"content":5}'),
    ("/tokenize", '{"content":"a","with_pieces":1e400}'),
    ("/detokenize", '{"tokens":[1e400]}'),
    ("/detokenize", '{"tokens":"abc"}'),
    ("/slots/0?action=save", '{"filename":5}'),
    ("/slots/0?action=adopt", '{"state":5}'),
    ("/v1/prefill", '{"prompt":"a","n_predict":1e400}'),
    ("/completion", '{"prompt":"a"'),
    ("/completion", '\xff\xfe'),
]


@pytest.mark.parametrize("path,body", MISTAKES)
def test_client_mistakes_are_4xx(server, path, body):
    assert_4xx(server.post(path, body.encode("latin-1")))


# ---- 4: slow clients ------------------------------------------------------------------------------

def test_slow_clients_neither_starve_others_nor_stay(tmp_path):
    s = Server(tmp_path, "-np", "2", "-c", "1024", "--request-timeout", "3")
    try:
        socks = []
        for _ in range(40):
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            sock.sendall(b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            socks.append(sock)
        stop = threading.Event()
        closed_at = {}
        start = time.time()

        def trickle(i, sock):
            while not stop.is_set():
                try:
                    sock.sendall(b"X")
                    sock.settimeout(0.5)
                    try:
                        if sock.recv(4096) == b"":
                            raise ConnectionResetError
                        raise ConnectionResetError  # an answer (408) means the server gave up on it
                    except socket.timeout:
                        pass
                except OSError:
                    closed_at[i] = time.time() - start
                    return

        threads = [threading.Thread(target=trickle, args=(i, sk), daemon=True) for i, sk in enumerate(socks)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        for _ in range(5):  # /health and a generation are served meanwhile
            t0 = time.time()
            assert s.get("/health") == (200, {"status": "ok"})
            assert time.time() - t0 < 1.0
        status, body = s.post("/completion", {"prompt": "slow clients", "n_predict": 4, "temperature": 0})
        assert status == 200 and body["tokens_predicted"] == 4
        for t in threads:
            t.join(timeout=10)
        stop.set()
        # Each byte used to restart the timeout; now the request as a whole has 3 s.
        assert len(closed_at) == 40, closed_at
        assert max(closed_at.values()) < 7.0, closed_at
        for sock in socks:
            sock.close()
        assert s.proc.poll() is None
    finally:
        s.stop()


def test_too_many_connections_get_503(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", "512", "--threads-http", "4")
    try:
        idle = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(4)]
        time.sleep(0.3)
        head, body = raw_request(s.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert head.startswith("HTTP/1.1 503"), head
        assert json.loads(body)["error"]["type"] == "unavailable_error"
        for sock in idle:
            sock.close()
        time.sleep(0.3)
        assert s.get("/health")[0] == 200
    finally:
        s.stop()


# ---- 5-7: the save folder ----------------------------------------------------------------------

@pytest.fixture
def saver(tmp_path):
    folder = tmp_path / "states"
    folder.mkdir()
    s = Server(tmp_path / "srv", "-np", "2", "-c", "4096", "--slot-save-path", str(folder))
    yield s, folder
    s.stop()


def fill(server, slot, n_tokens, n_predict=0, base=100):
    status, body = server.post("/completion", {"prompt": [base + (i % 50) for i in range(n_tokens)], "id_slot": slot,
                                               "n_predict": n_predict, "temperature": 0})
    assert status == 200, body
    return body


def test_concurrent_saves_to_one_name(saver):
    s, folder = saver
    fill(s, 0, 64)
    fill(s, 1, 80)
    answers = []

    def save(slot):
        answers.append(s.post("/slots/%d?action=save" % slot, {"filename": "race.bin"}))

    for _ in range(30):
        threads = [threading.Thread(target=save, args=(slot,)) for slot in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert all(status == 200 for status, _ in answers), [a for a in answers if a[0] != 200][:3]
    assert sorted(os.listdir(folder)) == ["race.bin"]
    assert s.post("/slots/0?action=restore", {"filename": "race.bin"})[0] == 200


def test_save_folder_cannot_be_misused(saver, tmp_path):
    s, folder = saver
    fill(s, 0, 32)
    outside = tmp_path / "outside.txt"
    outside.write_text("root:x:0:0:secret\n")
    (folder / "notes.txt").write_text("the user's own notes")
    os.symlink(str(outside), str(folder / "victim"))
    os.symlink(str(outside), str(folder / "linked.bin.tmp"))  # the old fixed temp path
    for name in ["notes.txt", "victim"]:
        msg = assert_4xx(s.post("/slots/0?action=save", {"filename": name}), 400)
        assert "not an agentkv state" in msg
    for name in [".hidden", ".bashrc", "x.tmp"]:
        assert_4xx(s.post("/slots/0?action=save", {"filename": name}), 400)
    assert (folder / "notes.txt").read_text() == "the user's own notes"
    assert outside.read_text() == "root:x:0:0:secret\n"
    # A save next to a pre-placed temp symlink writes its own file.
    assert s.post("/slots/0?action=save", {"filename": "linked.bin"})[0] == 200
    assert outside.read_text() == "root:x:0:0:secret\n"
    # Restore: no symlinks followed, no bytes or sizes of foreign files in errors.
    for name in ["victim", "notes.txt", "linked.bin.tmp"]:
        msg = assert_4xx(s.post("/slots/1?action=restore", {"filename": name}), 400)
        assert "root" not in msg and "the us" not in msg and "bytes" not in msg, msg
        assert str(folder) not in msg and str(tmp_path) not in msg, msg
    msg = assert_4xx(s.post("/slots/1?action=restore", {"filename": "missing.bin"}), 400)
    assert str(folder) not in msg
    assert s.post("/slots/1?action=restore", {"filename": "linked.bin"})[0] == 200
    # Overwriting an agentkv state is fine.
    assert s.post("/slots/1?action=save", {"filename": "linked.bin"})[0] == 200


def test_stale_temporary_files_are_removed_at_start(tmp_path):
    folder = tmp_path / "states"
    folder.mkdir()
    (folder / ".agentkv-tmp-0123456789abcdef0001").write_bytes(b"AKVS" + b"\0" * 100)
    (folder / "old.bin.tmp").write_bytes(b"AKVS" + b"\0" * 100)  # left by an earlier version
    (folder / "keep.tmp").write_text("not a state")
    (folder / "keep.bin").write_bytes(b"AKVS" + b"\0" * 100)
    s = Server(tmp_path / "srv", "-np", "1", "--slot-save-path", str(folder))
    try:
        assert sorted(os.listdir(folder)) == ["keep.bin", "keep.tmp"]
        assert "removed 2 temporary files" in s.log()
    finally:
        s.stop()


# ---- 6: restore makes room ---------------------------------------------------------------------

def test_restore_drops_idle_caches_like_a_prompt(saver):
    s, _ = saver
    fill(s, 0, 2000)
    assert s.post("/slots/0?action=save", {"filename": "big.bin"})[0] == 200
    assert s.post("/slots/0?action=erase", {})[0] == 200
    fill(s, 1, 3000, base=300)  # slot 1 idle, holding 3000 of 4096 cells
    status, body = s.post("/slots/0?action=restore", {"filename": "big.bin"})
    assert status == 200, body
    assert body["n_restored"] == 2000
    slots = {sl["id"]: sl for sl in s.get("/slots")[1]}
    assert slots[0]["n_tokens_cached"] == 2000 and slots[1]["n_tokens_cached"] == 0


def test_restore_without_room_is_503(saver):
    s, _ = saver
    fill(s, 0, 2000)
    assert s.post("/slots/0?action=save", {"filename": "big.bin"})[0] == 200
    assert s.post("/slots/0?action=erase", {})[0] == 200
    # Slot 1 generates (busy) while holding most of the memory.
    conn = s.connection()
    conn.request("POST", "/completion", body=json.dumps({
        "prompt": [300 + (i % 50) for i in range(3000)], "id_slot": 1, "n_predict": 1000, "temperature": 0,
        "stream": True}).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.fp.readline()  # the first event: slot 1 is generating
    status, body = s.post("/slots/0?action=restore", {"filename": "big.bin"})
    conn.close()
    assert status == 503, body  # a capacity condition, not the client's fault (was 400)
    assert body["error"]["type"] == "unavailable_error" and "retry" in body["error"]["message"]


# ---- 8: privacy and browsers -------------------------------------------------------------------

def test_slots_hide_prompts_by_default(server):
    secret = "my secret PIN is 4711"
    assert server.post("/completion", {"prompt": secret, "n_predict": 1})[0] == 200
    slots = server.get("/slots")[1]
    assert all(sl["prompt"] == "" for sl in slots)
    assert secret not in json.dumps(slots)


def test_slots_show_prompts_when_asked(tmp_path):
    for args, headers in [(["--slots-show-prompts"], {}),
                          (["--api-key", "k"], {"Authorization": "Bearer k"})]:
        s = Server(tmp_path / args[0].strip("-"), "-np", "1", "-c", "512", *args)
        try:
            assert s.post("/completion", {"prompt": "visible text", "n_predict": 1}, headers=headers)[0] == 200
            assert any("visible text" in sl["prompt"] for sl in s.get("/slots", headers=headers)[1])
        finally:
            s.stop()


def test_no_absolute_paths_in_answers(server):
    props = server.get("/props")[1]
    assert props["model_path"] == "qwen3-micro.gguf"
    assert "/" not in json.dumps(props["model_path"])


def test_cross_origin_requests(tmp_path, server):
    body = {"prompt": "a", "n_predict": 1}
    assert_4xx(server.post("/completion", body, headers={"Origin": "http://evil.example"}), 403)
    assert_4xx(server.get("/slots", headers={"Origin": "http://evil.example"}), 403)
    assert_4xx(server.post("/slots/0?action=erase", b"", headers={"Origin": "null"}), 403)
    # Same origin (a page of this server itself) is fine.
    same = "http://127.0.0.1:%d" % server.port
    assert server.post("/completion", body, headers={"Origin": same})[0] == 200
    s = Server(tmp_path, "-np", "1", "-c", "512", "--cors", "http://app.example")
    try:
        conn = s.connection()
        conn.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200  # llama-server's answer to a preflight
        assert resp.getheader("Access-Control-Allow-Origin") == "http://app.example"
        assert "POST" in resp.getheader("Access-Control-Allow-Methods")
        assert resp.getheader("Access-Control-Allow-Headers") == "content-type, authorization"
        conn.close()
        conn = s.connection()
        conn.request("POST", "/completion", body=json.dumps(body).encode(),
                     headers={"Origin": "http://app.example", "Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200 and resp.getheader("Access-Control-Allow-Origin") == "http://app.example"
        conn.close()
        conn = s.connection()
        conn.request("OPTIONS", "/completion", headers={"Origin": "http://other.example"})
        assert conn.getresponse().status == 403
        conn.close()
    finally:
        s.stop()


def test_json_endpoints_take_json_only(server):
    body = json.dumps({"prompt": "a", "n_predict": 1}).encode()
    for ctype in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]:
        assert_4xx(server.post("/completion", body, headers={"Content-Type": ctype}), 415)
    assert server.post("/completion", body, headers={"Content-Type": "application/json; charset=utf-8"})[0] == 200


def test_host_header_is_checked(tmp_path, server):
    assert_4xx(server.get("/props", headers={"Host": "evil.example:%d" % server.port}), 403)
    assert_4xx(server.post("/slots/0?action=erase", b"", headers={"Host": "rebind.evil.example"}), 403)
    for host in ["127.0.0.1:%d" % server.port, "localhost:%d" % server.port, "localhost", "[::1]:%d" % server.port]:
        assert server.get("/props", headers={"Host": host})[0] == 200, host
    s = Server(tmp_path, "-np", "1", "-c", "512", "--allowed-host", "agentkv.internal")
    try:
        assert s.get("/props", headers={"Host": "agentkv.internal:8080"})[0] == 200
        assert s.get("/props", headers={"Host": "other.internal"})[0] == 403
    finally:
        s.stop()


def test_cache_salt_keeps_tenants_apart(server):
    prompt = "tenant A's secret system prompt: the PIN is 4711. " * 4
    greedy = {"prompt": prompt, "n_predict": 1, "temperature": 0}  # the answers are compared below
    first = server.post("/completion", {**greedy, "cache_salt": "tenant-a", "id_slot": 2})[1]
    again = server.post("/completion", {**greedy, "cache_salt": "tenant-a", "id_slot": 2})[1]
    assert again["timings"]["cache_n"] > 0
    other = server.post("/completion", {**greedy, "cache_salt": "tenant-b", "id_slot": 2})[1]
    assert other["timings"]["cache_n"] == 0
    unsalted = server.post("/completion", greedy)[1]
    assert unsalted["timings"]["cache_n"] == 0 or unsalted["id_slot"] != 2
    assert first["content"] == other["content"]


# ---- 9: Content-Length ---------------------------------------------------------------------------

@pytest.mark.parametrize("header", [b"Content-Length: -5", b"Content-Length: abc", b"Content-Length: 1e3",
                                    b"Content-Length: 5\r\nContent-Length: 6",
                                    b"Content-Length: 5\r\nTransfer-Encoding: chunked",
                                    b"Transfer-Encoding: gzip, chunked"])
def test_bad_framing_is_400_at_once(server, header):
    t0 = time.time()
    head, body = raw_request(server.port, b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                          b"Content-Type: application/json\r\n" + header + b"\r\n\r\n", read_all=False)
    assert head.startswith("HTTP/1.1 400"), head
    assert time.time() - t0 < 1.0
