"""Integration tests of `agentkv serve`: the real binary on 127.0.0.1 with a fixture model.

AGENTKV_BIN names the agentkv binary (default: the first build*/agentkv found under the repo);
AGENTKV_FIXTURES the fixtures folder (default: ../shared/fixtures beside the repo). Only the
standard library is used, so any Python 3 with pytest runs them.

Without the fixtures folder (a clone on its own) a test that needs it is skipped by name with
FIXTURES_MISSING as its reason, not failed: at run time where a server starts on a fixture model
(Server) or the reference is read, by the needs_fixtures mark where a test runs the binary on a
fixture itself. Tests on the built-in or the trained model keep running.
"""

import glob
import http.client
import json
import os
import re
import signal
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.environ.get("AGENTKV_FIXTURES", os.path.join(os.path.dirname(REPO), "shared", "fixtures"))
MODEL = os.path.join(FIXTURES, "models", "qwen3-micro.gguf")
# tests/fixtures_note.cmake counts this reason in pytest's -rs summary.
FIXTURES_MISSING = "fixtures not found at %s: the full suite needs them beside the clone (README)" % FIXTURES
needs_fixtures = pytest.mark.skipif(not os.path.isdir(FIXTURES), reason=FIXTURES_MISSING)


def _find_binary():
    env = os.environ.get("AGENTKV_BIN")
    if env:
        return env
    for candidate in sorted(glob.glob(os.path.join(REPO, "build*", "agentkv"))):
        if os.access(candidate, os.X_OK):
            return candidate
    pytest.exit("agentkv binary not found: set AGENTKV_BIN", returncode=2)


class Server:
    """A running `agentkv serve`, with small HTTP helpers that never raise on HTTP errors."""

    def __init__(self, tmp_path, *args, model=MODEL, env=None):
        os.makedirs(str(tmp_path), exist_ok=True)
        self.log_path = os.path.join(str(tmp_path), "server.log")
        self._log = open(self.log_path, "wb")
        # AGENTKV_TEST_SPEC=1 (ctest server_pytest_spec): every server drafts (speculative decoding),
        # and the tests must pass unchanged: drafts never change an answer. With batch-invariant
        # numerics: a drafted pass is a batch of k + 1 rows, which llama.cpp's numerics round
        # otherwise than one-row steps, and the draft length follows measured timings
        # (docs/speculative.md), so only those make "cached equals uncached" exact.
        # AGENTKV_TEST_SPEC=draft: every server drafts with a draft model, the model itself (its
        # greedy drafts all accepted, sampled ones not always), besides the n-gram lookup.
        spec = os.environ.get("AGENTKV_TEST_SPEC")
        if spec in ("1", "draft") and "--spec-type" not in args and "-md" not in args and "--embedding" not in args:
            args = (*args, "--spec-type", "ngram-simple" if spec == "1" else "ngram-simple,draft-simple")
            if spec == "draft":  # 4 drafts a step whatever the cost model says (it would stop a self-draft)
                args = (*args, "-md", model, "--draft-p-min", "0", "--no-spec-adaptive", "--draft-max", "4")
            if "--batch-invariant" not in args:
                args = (*args, "--batch-invariant")
        cmd = [_find_binary(), "serve", "-m", model, "--port", "0", "-t", "2", *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **env) if env else None)
        self.port = self._wait_for_port()
        self._wait_until_ready()

    def _wait_for_port(self, timeout=30.0):
        # Here rather than in __init__, so that subclasses starting their own process are covered.
        if not os.path.isdir(FIXTURES) and any(str(a).startswith(FIXTURES) for a in self.proc.args):
            self.stop()  # its model is a fixture: the test is skipped, not failed
            pytest.skip(FIXTURES_MISSING)
        deadline = time.time() + timeout
        while time.time() < deadline:
            match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log())
            if match:
                return int(match.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError("server exited early:\n" + self.log())
            time.sleep(0.05)
        raise RuntimeError("server did not listen:\n" + self.log())

    def _wait_until_ready(self, timeout=60.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _ = self.request("GET", "/health")
            if status == 200:
                return
            if self.proc.poll() is not None:
                raise RuntimeError("server exited while loading:\n" + self.log())
            time.sleep(0.05)
        raise RuntimeError("server not ready:\n" + self.log())

    def log(self):
        with open(self.log_path, "r", errors="replace") as f:
            return f.read()

    def connection(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=False):
        """Returns (status, parsed JSON or text). body: a JSON-able object, or bytes sent as is."""
        conn = self.connection()
        try:
            hdrs = {"Content-Type": "application/json"}
            hdrs.update(headers or {})
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            text = resp.read().decode("utf-8", errors="replace")
            if raw or not resp.getheader("Content-Type", "").startswith("application/json"):
                return resp.status, text
            return resp.status, json.loads(text)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def stream(self, path, body, headers=None):
        """POSTs a streaming request; returns (status, [event payloads]); "[DONE]" kept as a string."""
        conn = self.connection()
        try:
            hdrs = {"Content-Type": "application/json"}
            hdrs.update(headers or {})
            conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
            resp = conn.getresponse()
            text = resp.read().decode("utf-8", errors="replace")
            events = []
            for block in text.split("\n\n"):
                if not block.strip():
                    continue
                assert block.startswith("data: "), block
                payload = block[len("data: "):]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
            return resp.status, resp.getheader("Content-Type", ""), events
        finally:
            conn.close()

    def wait_all_idle(self, timeout=10.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, slots = self.get("/slots")
            if status == 200 and not any(s["is_processing"] for s in slots):
                return slots
            time.sleep(0.05)
        raise AssertionError("slots still busy: " + json.dumps(self.get("/slots")[1]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


GREEDY = {"temperature": 0, "repeat_penalty": 2.0, "repeat_last_n": 64, "return_tokens": True}


def greedy_completion(server, prompt, n_predict=4, **extra):
    """A greedy /completion that must succeed; the body, with the generated token ids."""
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": n_predict, **GREEDY, **extra})
    assert status == 200, body
    return body


def wait_for(predicate, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def metric(server, name):
    """One llamacpp:NAME value of /metrics (the server needs --metrics)."""
    status, text = server.request("GET", "/metrics", raw=True)
    assert status == 200, text
    match = re.search(r"^llamacpp:%s (\S+)$" % re.escape(name), text if isinstance(text, str) else text.decode(), re.M)
    assert match, name
    return float(match.group(1))


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The shared server: 4 slots, 4096 cells, metrics on, 1 MB body limit."""
    s = Server(tmp_path_factory.mktemp("main"), "-np", "4", "-c", "4096", "--metrics", "--max-body", "1000000")
    yield s
    s.stop()
    assert s.proc.returncode == 0, s.log()


@pytest.fixture(scope="session")
def reference():
    """llama.cpp's tokenization and greedy generation for the fixture prompts (qwen3-micro)."""
    if not os.path.isdir(FIXTURES):
        pytest.skip(FIXTURES_MISSING)
    with open(os.path.join(FIXTURES, "reference", "qwen3-micro.json")) as f:
        return json.load(f)["cases"]


# The models the memory tests run on, by key: the fixtures, and the presets of the architectures
# added since (made by `agentkv mkmodel --preset NAME`, once per test run).
FIXTURE_MODELS = {"dense": "qwen3-micro.gguf", "hybrid": "qwen35moe-micro.gguf"}
PRESET_MODELS = {"qwen3moe": "qwen3moe-micro", "llama": "llama-micro", "qwen3next": "qwen3next-micro",
                 "gemma3": "gemma3-micro", "gpt-oss": "gpt-oss-micro"}
# Chat-format presets: the same architecture as a memory model, another family's chat vocabulary.
CHAT_PRESET_MODELS = {"mistral": "mistral-micro"}
MEMORY_MODELS = sorted(FIXTURE_MODELS) + sorted(PRESET_MODELS)
HYBRID_MODELS = ["hybrid", "qwen3next"]  # Gated DeltaNet + attention: recurrent snapshots
# The models whose sequences cannot resume anywhere in their own tokens: the hybrids (recurrent
# state: at a snapshot) and the sliding-window ones, whose windowed layers keep only the window (at a
# point whose window the cached pages hold, or a snapshot: docs/memory-semantics.md §10).
SNAPSHOT_MODELS = HYBRID_MODELS + ["gemma3", "gpt-oss"]
_preset_files = {}


def model_file(key):
    """The GGUF of a test model key (a fixture path, or a preset made on first use)."""
    if key in FIXTURE_MODELS:
        return os.path.join(FIXTURES, "models", FIXTURE_MODELS[key])
    if not os.path.isdir(FIXTURES):  # the presets carry the fixture tokenizer
        pytest.skip(FIXTURES_MISSING)
    if key not in _preset_files:
        import tempfile
        folder = tempfile.mkdtemp(prefix="agentkv-presets-")
        preset = PRESET_MODELS.get(key) or CHAT_PRESET_MODELS[key]
        path = os.path.join(folder, preset + ".gguf")
        subprocess.run([_find_binary(), "mkmodel", "--preset", preset, "-o", path],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        _preset_files[key] = path
    return _preset_files[key]
