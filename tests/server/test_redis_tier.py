"""The shared page tier (--cache-redis, docs/deploy.md): full KV pages one instance computed are
written to Redis in the background and fetched by another instance whose prompt continues them,
in one round trip, verified, and attached: after instance A dies, instance B evaluates only what
A never computed, with the same output. Redis being down never fails a request; the instance
reconnects when it is back. redis-server runs on loopback, started and stopped here."""

import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import Server, greedy_completion as complete, wait_for

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
pytestmark = pytest.mark.skipif(not os.path.exists(REDIS), reason="redis-server is not installed (scripts/setup.sh)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self, tmp_path, port):
        self.port = port
        self.proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                      "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if self.command("PING") == "+PONG":
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def command(self, *args):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args)).encode())
            return s.recv(4096).decode().strip()

    def dbsize(self):
        return int(self.command("DBSIZE")[1:])

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def test_a_conversation_moves_to_another_instance_through_redis(tmp_path, reference):
    redis = Redis(tmp_path, free_port())
    url = "redis://127.0.0.1:%d" % redis.port
    a = Server(tmp_path / "a", "-np", "1", "--cache-redis", url, "--metrics")
    b = Server(tmp_path / "b", "-np", "1", "--cache-redis", url, "--metrics")
    try:
        turn1 = reference[5]["prompt_tokens"]
        first = complete(a, turn1)
        turn2 = turn1 + first["tokens"] + reference[3]["prompt_tokens"]
        second = complete(a, turn2)
        assert second["timings"]["cache_n"] == len(turn1) + 3
        held = len(turn2) + 3  # A's cache: turn 2 and the evaluated part of its answer
        assert wait_for(lambda: redis.dbsize() >= held // 16), (redis.dbsize(), a.log())
        a.stop()  # A dies; the session's next turn lands on B

        turn3 = turn2 + second["tokens"] + [21, 22]
        third = complete(b, turn3)
        assert third["timings"]["cache_n"] == held // 16 * 16, (third["timings"], b.log())
        assert third["timings"]["prompt_n"] == len(turn3) - held // 16 * 16
        assert "fetched %d pages" % (held // 16) in b.log()
        assert third["tokens"] == complete(b, turn3, cache_prompt=False, cache_salt="reference")["tokens"]

        # A salted prompt shares nothing through the tier either.
        salted = complete(b, turn3, cache_salt="tenant-x")
        assert salted["timings"]["cache_n"] == 0

        # Redis goes away: requests are computed, never failed; then it comes back.
        port = redis.port
        redis.stop()
        other = list(range(2000, 2100))
        assert complete(b, other)["timings"]["cache_n"] == 0
        assert "computing instead" in b.log()
        redis = Redis(tmp_path, port)
        time.sleep(1.2)  # the tier retries once a second
        later = list(range(3000, 3200))
        complete(b, later)
        assert wait_for(lambda: redis.dbsize() >= 200 // 16), b.log()
        assert b.log().count("connected to 127.0.0.1:%d" % port) >= 2
    finally:
        a.stop()
        b.stop()
        redis.stop()
