"""The shared page tier (--cache-redis, docs/deploy.md): the KV pages one instance computed (full
pages as they fill, a turn's partial last page at its end, and for hybrid models the recurrent
snapshots) are written to Redis in the background and fetched by another instance whose prompt
continues them, verified, and attached: after instance A dies, instance B evaluates only what A
never computed, with the same output. Redis being down never fails a request; the instance
reconnects when it is back. redis-server runs on loopback, started and stopped here."""

import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import Server, greedy_completion as complete, metric, model_file, wait_for

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
pytestmark = pytest.mark.skipif(not os.path.exists(REDIS), reason="redis-server is not installed (scripts/setup.sh)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self, tmp_path, port, start=True):
        """A redis-server of its own on loopback, or (start=False) a client of one already starting there."""
        self.port = port
        self.proc = None if not start else subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
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

    def settle(self, at_least=1, quiet=1.0, timeout=15):
        """Waits until the key count is at least at_least and has not changed for `quiet` seconds
        (the instances write in the background); returns it."""
        deadline = time.time() + timeout
        last, since = -1, time.time()
        while time.time() < deadline:
            n = self.dbsize()
            if n != last:
                last, since = n, time.time()
            elif n >= at_least and time.time() - since >= quiet:
                return n
            time.sleep(0.05)
        return last

    def stop(self):
        if self.proc:
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
        # Its full pages, and each turn's partial last page (a record per length).
        tails = sum(1 for end in (len(turn1) + 3, held) if end % 16)
        assert redis.settle(held // 16 + tails) == held // 16 + tails, (redis.dbsize(), a.log())
        a.stop()  # A dies; the session's next turn lands on B

        turn3 = turn2 + second["tokens"] + [21, 22]
        third = complete(b, turn3)
        assert third["timings"]["cache_n"] == held, (third["timings"], b.log())
        assert third["timings"]["prompt_n"] == len(turn3) - held
        assert "fetched %d pages (K/V through position %d)" % (held // 16 + (held % 16 > 0), held) in b.log()
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


@pytest.mark.parametrize("kind", ["hybrid", "gemma3", "gpt-oss"])
def test_a_hybrid_conversation_moves_with_its_recurrent_snapshot(tmp_path, reference, kind):
    """A hybrid model needs the recurrent state where the K/V it attaches end (a sliding-window
    model its window's rows, docs/memory-semantics.md §10): A's snapshot at the end of its turn
    goes to Redis with the pages (a sliding-window model's pages also send their window rows),
    and B restores it (or the window rows). Batch-invariant numerics: the random-weight
    presets' near ties must not flip between the cached and the uncached run."""
    model = model_file(kind)
    redis = Redis(tmp_path, free_port())
    url = "redis://127.0.0.1:%d" % redis.port
    a = Server(tmp_path / "a", "-np", "1", "--cache-redis", url, "--metrics", "--batch-invariant", model=model)
    b = Server(tmp_path / "b", "-np", "1", "--cache-redis", url, "--metrics", "--batch-invariant", model=model)
    try:
        turn1 = reference[5]["prompt_tokens"]
        first = complete(a, turn1)
        turn2 = turn1 + first["tokens"] + reference[3]["prompt_tokens"]
        second = complete(a, turn2)
        assert second["timings"]["cache_n"] == len(turn1) + 3, second["timings"]
        held = len(turn2) + 3
        assert metric(a, "tier_snapshots_sent_total") >= 2, a.log()
        redis.settle(held // 16)
        a.stop()

        turn3 = turn2 + second["tokens"] + [21, 22]
        third = complete(b, turn3)
        assert third["timings"]["cache_n"] == held, (third["timings"], b.log())
        assert third["timings"]["prompt_n"] == len(turn3) - held
        if kind == "hybrid":
            assert "fetched the state snapshot at position %d" % held in b.log()
            assert metric(b, "tier_snapshots_fetched_total") == 1
        else:  # the window rows of the pages before `held` came with them: no snapshot needed
            assert "fetched the window rows of" in b.log(), b.log()
            assert metric(b, "tier_snapshots_fetched_total") == 0
        assert third["tokens"] == complete(b, turn3, cache_prompt=False, cache_salt="reference")["tokens"]
        # Another tenant's salt finds neither pages nor snapshots.
        assert complete(b, turn3, cache_salt="tenant-x")["timings"]["cache_n"] == 0
    finally:
        a.stop()
        b.stop()
        redis.stop()
