"""Liveness of the shared KV memory: whatever sequence of requests a server has seen, a request
that runs alone is answered (200) with the tokens of an uncached evaluation, and the memory's
accounting adds up. Issue 46: on the hybrid model, a prompt diverging from a cached one in its
middle found "no room in memory" and from then on every request failed until a restart.

test_liveness_property runs random sequences of operations (prompts sharing prefixes, uncached
prompts, pinned slots, erase / save / restore, cancelled streams, concurrent bursts) on servers of
varied configurations; a failure prints the seed, the configuration and the operation log, and
the replay command it prints (AGENTKV_LIVENESS_SEED, -k) runs the same operations again (the timing
of concurrent ones aside). Another AGENTKV_LIVENESS_SEED explores other sequences;
test_liveness_found_sequences replays the seeds that found failures."""

import json
import os
import random
import re
import socket
import subprocess
import threading
import time

import pytest

from conftest import FIXTURES, GREEDY, MODEL, Server, _find_binary

MODELS = {"dense": "qwen3-micro.gguf", "hybrid": "qwen35moe-micro.gguf"}
PAGE_TOKENS = 16  # tokens (cells) of one KV page
MIB = 1 << 20
CHECK_ENV = {"AGENTKV_CHECK_MEMORY": "1"}  # the server verifies the prefix cache after every step
# Tested and reference servers compare greedy tokens, so all run with batch-invariant kernels. By
# default a token's numerics depend on its batch: KV rows computed beside other tokens differ in
# their last bits, which flips a greedy choice between near-tied logits (margins under 0.004 nats
# were seen) in about 1 request in 1,500 that reuse cached pages. With the flag a cached prompt
# gives the bits of an uncached one (docs/memory-semantics.md), so any difference is a wrong cache.
EXACT = ["--batch-invariant"]


def model_path(key):
    return os.path.join(FIXTURES, "models", MODELS[key])


def random_tokens(rng, n):
    return [rng.randrange(1000, 30000) for _ in range(n)]


def completion_body(prompt, n_predict=4, **extra):
    return {"prompt": prompt, "n_predict": n_predict, **GREEDY, **extra}


def reference_tokens(server, prompt, n_predict=4):
    """Greedy tokens of an uncached evaluation of the prompt."""
    status, body = server.post("/completion", completion_body(prompt, n_predict, cache_prompt=False))
    assert status == 200, "reference request failed: %s" % (body,)
    return body["tokens"]


def read_metrics(server):
    status, text = server.get("/metrics", raw=True)
    assert status == 200, text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^llamacpp:(\w+) (\S+)$", text, re.M)}


def memory_props(server):
    status, props = server.get("/props")
    assert status == 200, props
    return props["memory"]


def accounting_errors(metrics, snapshot_bytes, snapshot_budget, all_erased=False):
    """What does not add up in the memory's gauges (an empty list when all holds)."""
    m = metrics
    errors = []

    def need(ok, what):
        if not ok:
            errors.append(what)

    need(m["kv_cells_used"] <= m["kv_cells_total"], "kv_cells_used > kv_cells_total")
    need(m["pages_free"] == (m["kv_cells_total"] - m["kv_cells_used"]) // PAGE_TOKENS,
         "pages_free != (kv_cells_total - kv_cells_used) // %d" % PAGE_TOKENS)
    need(m["pages_in_use"] <= m["pages_cached"], "pages_in_use > pages_cached")
    need(m["checkpoint_bytes"] <= snapshot_budget, "checkpoint_bytes > the snapshot budget %d" % snapshot_budget)
    need(m["checkpoint_bytes"] == m["snapshots"] * snapshot_bytes,
         "checkpoint_bytes != snapshots x %d bytes" % snapshot_bytes)
    need(m["kv_cells_cached"] <= m["kv_cells_used"], "kv_cells_cached > kv_cells_used")
    if all_erased:
        need(m["kv_cells_used"] == m["kv_cells_cached"], "every slot erased, yet kv_cells_used != kv_cells_cached")
    if errors:
        gauges = ("kv_cells_total", "kv_cells_used", "kv_cells_cached", "pages_free", "pages_cached", "pages_in_use",
                  "checkpoint_bytes", "snapshots")
        errors.append("gauges: " + ", ".join("%s=%d" % (g, m[g]) for g in gauges))
    return errors


# ---------------------------------------------------------------------------------------------
# Issue 46: the sequence that wedged the hybrid model's memory.

ISSUE_RNG_SEED = 1
PROMPT_P = None  # built once: P (14,000 tokens), Q (P's first 7,000 + 7,000 others), P + 1,500


def issue_prompts():
    global PROMPT_P
    if PROMPT_P is None:
        rng = random.Random(ISSUE_RNG_SEED)
        p = random_tokens(rng, 14000)
        PROMPT_P = {"P": p, "P+1500": p + random_tokens(rng, 1500), "Q": p[:7000] + random_tokens(rng, 7000)}
    return PROMPT_P


@pytest.fixture(scope="module")
def issue_references(tmp_path_factory):
    """Per model: the uncached greedy tokens of P, Q and P+1500, from a fresh server."""
    memo = {}

    def get(model_key):
        if model_key not in memo:
            s = Server(tmp_path_factory.mktemp("issue-ref-" + model_key), "-np", "1", "-c", "16384", *EXACT,
                       model=model_path(model_key))
            try:
                memo[model_key] = {name: reference_tokens(s, prompt) for name, prompt in issue_prompts().items()}
            finally:
                s.stop()
        return memo[model_key]

    return get


@pytest.mark.parametrize("first_uncached", [False, True], ids=["cached", "uncached-first"])
@pytest.mark.parametrize("model_key", sorted(MODELS))
def test_issue_sequence(tmp_path, issue_references, model_key, first_uncached):
    expected = issue_references(model_key)
    prompts = issue_prompts()
    s = Server(tmp_path, "-np", "1", "-c", "16384", "--metrics", *EXACT, model=model_path(model_key), env=CHECK_ENV)
    try:
        memory = memory_props(s)
        q_limit = 7000 + memory["snapshot_spacing"]
        steps = ["P", "P+1500", "P", "erase", "P", "Q", "erase", "P", "Q", "P+1500"]
        if first_uncached:
            steps = ["P nocache", "Q nocache", "P+1500 nocache"] + steps
        done = []
        for step in steps:
            name, _, option = step.partition(" ")
            if name == "erase":
                status, body = s.post("/slots/0?action=erase", {})
                assert status == 200, (done, step, body)
            else:
                extra = {"cache_prompt": False} if option == "nocache" else {}
                status, body = s.post("/completion", completion_body(prompts[name], **extra))
                assert status == 200, (done, step, body)
                assert body["tokens"] == expected[name], (done, step, "tokens differ from the uncached evaluation")
                if name == "Q" and not option:
                    # P is cached: Q evaluates its 7,000 new tokens and at most one snapshot interval more.
                    assert body["timings"]["prompt_n"] <= q_limit, (done, step, body["timings"])
                step += " (prompt_n %d)" % body["timings"]["prompt_n"]
            errors = accounting_errors(read_metrics(s), memory["snapshot_bytes"], 256 * MIB)
            assert not errors, (done, step, errors)
            done.append(step)
        assert "no room in memory" not in s.log()
        assert s.proc.poll() is None, s.log()[-3000:]
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------
# A second server on a port that one already listens on.

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerOnPort(Server):
    """A Server that listens on the given port instead of any free one."""

    def __init__(self, tmp_path, port, *args, model=MODEL):
        os.makedirs(str(tmp_path), exist_ok=True)
        self.log_path = os.path.join(str(tmp_path), "server.log")
        self._log = open(self.log_path, "wb")
        cmd = [_find_binary(), "serve", "-m", model, "--port", str(port), "-t", "2", *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        self.port = self._wait_for_port()
        assert self.port == port
        self._wait_until_ready()


def test_second_server_on_a_busy_port(tmp_path):
    port = free_port()
    first = ServerOnPort(tmp_path / "first", port, "-np", "2", "-c", "1024")
    try:
        prompt = list(range(1000, 1100))
        before = reference_tokens(first, prompt)
        cmd = [_find_binary(), "serve", "-m", MODEL, "--port", str(port), "-t", "2", "-np", "1", "-c", "512"]
        try:
            second = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        except subprocess.TimeoutExpired as e:
            pytest.fail("a second server on busy port %d did not exit within 30 s; its output:\n%s"
                        % (port, (e.output or b"").decode(errors="replace")))
        output = second.stdout.decode(errors="replace")
        assert second.returncode != 0, output
        assert str(port) in output, output
        # The first server still answers, on fresh connections each time.
        for _ in range(5):
            status, props = first.get("/props")
            assert status == 200 and props["total_slots"] == 2
            assert reference_tokens(first, prompt) == before
        assert first.proc.poll() is None
    finally:
        first.stop()


# ---------------------------------------------------------------------------------------------
# The liveness property over random operation sequences.

# Per model, one server configuration per seed block, so that every model meets every feature.
CONFIGS = [
    {"n_slots": 1, "n_ctx": 512, "warm": False, "disk": False, "checkpoint_mib": 1},
    {"n_slots": 2, "n_ctx": 1024, "warm": True, "disk": False, "checkpoint_mib": 256},
    {"n_slots": 4, "n_ctx": 512, "warm": False, "disk": True, "checkpoint_mib": 1},
    {"n_slots": 3, "n_ctx": 2048, "warm": True, "disk": True, "checkpoint_mib": 256},
    {"n_slots": 1, "n_ctx": 1024, "warm": True, "disk": True, "checkpoint_mib": 256},
    {"n_slots": 2, "n_ctx": 512, "warm": False, "disk": False, "checkpoint_mib": 1},
]
REQUESTS_PER_RUN = 600  # 2 models x 6 configurations x 600 = 7,200 requests
STREAM_PREDICT = 24     # tokens a cancelled stream asks for (it is closed long before)
SEED_BASE = int(os.environ.get("AGENTKV_LIVENESS_SEED", "46000"))  # another value explores other sequences
CLOSED_EARLY = 0        # the "status" of a stream closed before its answer was read


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Per model, one uncached reference server: memoized greedy tokens of any prompt."""
    servers, memo, lock = {}, {}, threading.Lock()

    def get(model_key, prompt):
        key = (model_key, tuple(prompt))
        with lock:  # bursts ask from several threads
            if key not in memo:
                if model_key not in servers:
                    servers[model_key] = Server(tmp_path_factory.mktemp("ref-" + model_key), "-np", "1", "-c",
                                                "16384", *EXACT, model=model_path(model_key))
                memo[key] = reference_tokens(servers[model_key], prompt)
            return memo[key]

    yield get
    for s in servers.values():
        s.stop()


class LivenessRun:
    """One server's random operation sequence. Operations are drawn as callables returning
    (status, one line for the log, whether the answer is right); the run checks them."""

    def __init__(self, server, model_key, config, seed, references):
        self.server = server
        self.model_key = model_key
        self.config = config
        self.seed = seed
        self.rng = random.Random(seed)
        self.references = references
        self.snapshot_bytes = memory_props(server)["snapshot_bytes"]
        self.snapshot_budget = config["checkpoint_mib"] * MIB
        self.n_slots = config["n_slots"]
        # Every prompt leaves room for its generation: prompt + n_predict < n_ctx.
        self.max_prompt = config["n_ctx"] - STREAM_PREDICT - 1
        self.bases = [random_tokens(self.rng, self.max_prompt) for _ in range(3)]
        self.prompts = [self.new_prompt() for _ in range(6)]
        # slot -> the last prompt a solo request ran there: what a save of the slot likely holds, so
        # that a restore can be followed by that prompt's continuation (memory pressure may have
        # dropped the cache since: the continuation's tokens are checked all the same).
        self.slot_prompt = {}
        self.saved = {}  # restorable file -> the prompt its slot held (None: unknown)
        self.n_saves = 0
        self.log = []
        self.requests = 0     # operations sent: completions, streams, slot actions
        self.posts_sent = 0   # the server's log has a "request: POST" line for each it answered
        self.posts_logged = 0
        self.log_offset = 0   # bytes of the server's log read so far
        self.counter_lock = threading.Lock()

    # -- prompts -------------------------------------------------------------------------------

    def new_prompt(self):
        """A random prefix of a base sequence, then random tokens; a quarter over half the context."""
        rng = self.rng
        if rng.random() < 0.25:
            length = rng.randint(self.max_prompt // 2 + 1, self.max_prompt)
        else:
            length = rng.randint(4, self.max_prompt // 4)
        shared = rng.choice([length, rng.randint(0, length)])
        return rng.choice(self.bases)[:shared] + random_tokens(rng, length - shared)

    def pick_prompt(self):
        """A known prompt, a known prompt extended (an agent's next turn), or a new one."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.6:
            return rng.choice(self.prompts)
        if roll < 0.75:
            base = rng.choice(self.prompts)
            extended = base + random_tokens(rng, rng.randint(1, 40))
            prompt = extended if len(extended) <= self.max_prompt else base
        else:
            prompt = self.new_prompt()
        self.prompts.append(prompt)
        return prompt

    def name(self, prompt):
        return "p%d(%d tokens)" % (self.prompts.index(prompt), len(prompt))

    # -- operations ----------------------------------------------------------------------------

    def count_post(self):
        with self.counter_lock:  # bursts send from several threads
            self.requests += 1
            self.posts_sent += 1

    def completion(self, prompt, solo, cache_prompt=True, id_slot=None):
        extra = {} if cache_prompt else {"cache_prompt": False}
        if id_slot is not None:
            extra["id_slot"] = id_slot
        self.count_post()
        status, body = self.server.post("/completion", completion_body(prompt, **extra))
        line = "%s cache_prompt=%s id_slot=%s -> %d" % (self.name(prompt), cache_prompt, id_slot, status)
        if status != 200:
            return status, line + " " + json.dumps(body)[:300], True
        line += " slot %d cache_n %d prompt_n %d" % (body["id_slot"], body["timings"]["cache_n"],
                                                    body["timings"]["prompt_n"])
        expected = self.references(self.model_key, prompt)
        tokens = body["tokens"]
        if not solo and body["truncated"] and tokens == expected[:len(tokens)]:
            # The memory filled while others ran too: the server ends the generation early (tests/
            # server/test_memory_pressure.py); alone, the request fits.
            return status, line + " truncated after %d tokens: memory full" % len(tokens), True
        if tokens != expected:
            return status, line + " tokens %s, uncached %s" % (tokens, expected), False
        if solo:
            self.slot_prompt[body["id_slot"]] = prompt
        return status, line, True

    def cancelled_stream(self, prompt, n_events):
        """A streaming request whose connection is closed after n_events events (0: at once)."""
        self.count_post()
        conn = self.server.connection(timeout=60)
        try:
            body = completion_body(prompt, STREAM_PREDICT, stream=True)
            conn.request("POST", "/completion", json.dumps(body), {"Content-Type": "application/json"})
            if n_events == 0:
                return CLOSED_EARLY, "stream %s closed before any event" % self.name(prompt), True
            resp = conn.getresponse()
            if resp.status != 200:
                return resp.status, "stream %s -> %d %s" % (self.name(prompt), resp.status, resp.read()[:300]), True
            while True:
                line = resp.readline()
                if not line:
                    return 200, "stream %s ended before any event" % self.name(prompt), False
                if line.startswith(b"data: "):
                    return 200, "stream %s closed after 1 event" % self.name(prompt), True
        finally:
            conn.close()

    def slot_action(self, slot, action, filename=None, held_prompt=None):
        """POST /slots/N?action=...; a saved file becomes restorable once its save succeeded."""
        self.count_post()
        status, body = self.server.post("/slots/%d?action=%s" % (slot, action),
                                        {"filename": filename} if filename else {})
        if action == "save" and status == 200:
            self.saved[filename] = held_prompt
        line = "slot %d %s%s -> %d" % (slot, action, " " + filename if filename else "", status)
        return status, line + ("" if status == 200 else " " + json.dumps(body)[:300]), True

    def draw_action(self, solo):
        """One operation drawn at random, as a callable (solo: it will run alone)."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.62:
            prompt = self.pick_prompt()
            cache_prompt = rng.random() >= 0.15
            id_slot = rng.randrange(self.n_slots) if rng.random() < 0.25 else None
            return lambda: self.completion(prompt, solo, cache_prompt, id_slot)
        if roll < 0.74:
            prompt = self.pick_prompt()
            n_events = rng.randint(0, 1)
            return lambda: self.cancelled_stream(prompt, n_events)
        slot = rng.randrange(self.n_slots)
        if roll < 0.84:
            self.slot_prompt.pop(slot, None)
            return lambda: self.slot_action(slot, "erase")
        if roll < 0.92 or not self.saved:
            self.n_saves += 1
            filename = "slot%d-%d.bin" % (slot, self.n_saves)
            held_prompt = self.slot_prompt.get(slot) if solo else None
            return lambda: self.slot_action(slot, "save", filename, held_prompt)
        filename = rng.choice(sorted(self.saved))
        return lambda: self.slot_action(slot, "restore", filename)

    # -- the run -------------------------------------------------------------------------------

    def run(self):
        rng = self.rng
        while self.requests < REQUESTS_PER_RUN:
            roll = rng.random()
            if roll < 0.2:
                self.burst(rng.randint(2, 4))
            elif roll < 0.24:
                self.erase_all()
            elif roll < 0.3 and self.saved:
                self.restore_and_continue()
            else:
                self.solo(self.draw_action(solo=True))

    def record(self, line):
        self.log.append("#%d %s" % (len(self.log), line))

    def solo(self, action, note=""):
        status, line, right = action()
        self.record(note + line)
        self.after_operation()
        if status not in (200, CLOSED_EARLY) or not right:
            raise AssertionError("a request that ran alone failed: " + line)

    def burst(self, n):
        """n operations at once: each is answered 200 (right) or 503; a 503 then succeeds alone."""
        actions = [self.draw_action(solo=False) for _ in range(n)]
        results = [(None, "no answer", False)] * n

        def run(i):
            try:
                results[i] = actions[i]()
            except Exception as e:  # a dropped connection, a timeout
                results[i] = (None, "raised %r" % e, False)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.slot_prompt.clear()
        self.record("burst of %d: " % n + " | ".join(line for _, line, _ in results))
        self.after_operation()
        for status, line, right in results:
            if status not in (200, 503, CLOSED_EARLY) or not right:
                raise AssertionError("a concurrent request failed: " + line)
        for action, (status, _, _) in zip(actions, results):
            if status == 503:
                self.solo(action, "retry alone: ")

    def erase_all(self):
        for slot in range(self.n_slots):
            status, line, _ = self.slot_action(slot, "erase")
            if status != 200:
                self.record(line)
                raise AssertionError("an erase failed: " + line)
        self.slot_prompt.clear()
        self.record("erase every slot")
        self.after_operation(all_erased=True)

    def restore_and_continue(self):
        """Restores a saved file into a slot, then sends the prompt it held (or extends it) there."""
        rng = self.rng
        filename = rng.choice(sorted(self.saved))
        slot = rng.randrange(self.n_slots)
        self.solo(lambda: self.slot_action(slot, "restore", filename))
        prompt = self.saved[filename] or self.pick_prompt()
        if rng.random() < 0.5 and len(prompt) + 8 <= self.max_prompt:
            prompt = prompt + random_tokens(rng, 8)
            self.prompts.append(prompt)
        self.solo(lambda: self.completion(prompt, True, True, slot))

    def after_operation(self, all_erased=False):
        """Once no request runs: the server is alive, never ran out of room, and its gauges add up."""
        metrics = self.wait_quiet()
        errors = accounting_errors(metrics, self.snapshot_bytes, self.snapshot_budget, all_erased)
        if errors:
            raise AssertionError("the memory's accounting does not add up: " + "; ".join(errors))

    def wait_quiet(self, timeout=30):
        """The metrics once the server answered every POST sent (its log has a line for each) and
        no task runs or waits: a stream closed at once may not even have started its task yet."""
        deadline = time.time() + timeout
        while True:
            if self.server.proc.poll() is not None:
                raise AssertionError("the server died (exit status %s)" % self.server.proc.returncode)
            with open(self.server.log_path, "r", errors="replace") as f:
                f.seek(self.log_offset)
                text = f.read()
            whole_lines = text[:text.rfind("\n") + 1]
            self.log_offset += len(whole_lines.encode())
            if "no room in memory" in whole_lines:
                raise AssertionError("the server logged 'no room in memory'")
            self.posts_logged += whole_lines.count("request: POST ")
            if self.posts_logged >= self.posts_sent:
                metrics = read_metrics(self.server)
                if metrics["requests_processing"] == 0 and metrics["requests_deferred"] == 0:
                    return metrics
            if time.time() > deadline:
                raise AssertionError("the server is still busy %d s after the last operation (%d of %d POSTs "
                                     "answered)" % (timeout, self.posts_logged, self.posts_sent))
            time.sleep(0.01)

    def report(self, replay):
        return "seed %d, model %s, config %s, %d requests (replay: %s); operations:\n%s" % (
            self.seed, self.model_key, json.dumps(self.config), self.requests, replay, "\n".join(self.log))


def server_args(config, tmp_path):
    save_dir = tmp_path / "slots"
    save_dir.mkdir()
    args = ["-np", str(config["n_slots"]), "-c", str(config["n_ctx"]), "--metrics", "--slot-save-path",
            str(save_dir), "--ctx-checkpoint-mib", str(config["checkpoint_mib"]), *EXACT]
    if config["warm"]:
        args += ["--cache-warm", "64"]
    if config["disk"]:
        args += ["--cache-dir", str(tmp_path / "pages")]
    return args


def run_liveness(tmp_path, references, model_key, block, seed, replay):
    config = CONFIGS[block]
    s = Server(tmp_path, *server_args(config, tmp_path), model=model_path(model_key), env=CHECK_ENV)
    run = LivenessRun(s, model_key, config, seed, references)
    try:
        run.run()
    except Exception as e:
        report = run.report(replay)
        print(report)  # pytest shows it with the failure
        with open(os.path.join(str(tmp_path), "operations.log"), "w") as f:
            f.write(report)
        with open(os.path.join(str(tmp_path), "prompts.json"), "w") as f:
            json.dump(run.prompts, f)  # p<i> in the log is prompts[i]: for replaying one by hand
        raise AssertionError("%s\n%s\nserver log tail:\n%s" % (e, report[-6000:], s.log()[-4000:])) from e
    finally:
        s.stop()


@pytest.mark.parametrize("block", range(len(CONFIGS)))
@pytest.mark.parametrize("model_key", sorted(MODELS))
def test_liveness_property(tmp_path, references, model_key, block):
    seed = SEED_BASE + 100 * block + sorted(MODELS).index(model_key)
    replay = "AGENTKV_LIVENESS_SEED=%d pytest tests/server/test_liveness.py -k 'test_liveness_property and %s-%d'" % (
        SEED_BASE, model_key, block)
    run_liveness(tmp_path, references, model_key, block, seed, replay)


# Sequences that failed while this file was written (2026-12-06, after the issue-46 fix, 0bf36bc),
# kept as regressions; they replay the same operations, so after unrelated changes to the server
# they may no longer reach the state that failed (the random runs above go on looking).
FOUND_SEQUENCES = [
    # a 465-token prompt alone on 1 slot of 512 cells: 503 "no room in memory" (139 cells free)
    ("dense", 0, 1000),
    # a 486-token prompt alone on 1 slot of 512 cells: "memory is full", generation ends at 3 tokens
    ("dense", 0, 2000),
    # the same on 2 slots of 512 cells: "no room in memory" / generation ended after 1 token
    ("dense", 5, 602),
    ("dense", 5, 608),
    # hybrid, 1 slot, warm and disk tiers: a prompt continued from a snapshot at 207 gave other
    # tokens than an uncached run. Not the memory: its cached K/V differed in the last bit from an
    # uncached run's, because a 912-token prompt had taken the chunked delta rule (micro-batches of
    # 512+ tokens), which rounds by where its chunks fall; the first tokens were tied to 2e-6 nats.
    # --batch-invariant now keeps the step form (BatchInvariance.HybridLongBatches).
    ("hybrid", 4, 506),
]


@pytest.mark.parametrize("model_key, block, seed", FOUND_SEQUENCES,
                         ids=["dense-0-seed1000", "dense-0-seed2000", "dense-5-seed602", "dense-5-seed608",
                              "hybrid-4-seed506"])
def test_liveness_found_sequences(tmp_path, references, model_key, block, seed):
    replay = "pytest tests/server/test_liveness.py -k 'test_liveness_found_sequences and %s-%d-seed%d'" % (
        model_key, block, seed)
    run_liveness(tmp_path, references, model_key, block, seed, replay)
