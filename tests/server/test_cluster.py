"""Scale-out building blocks (docs/deploy.md): deploy/local-cluster.sh starts two instances behind
nginx with the shipped config (deploy/nginx/agentkv.conf). Sessions named by X-Session-Id stick to
one instance, so a session's next turn reuses its cache; POST /v1/cache/lookup tells a router which
instance holds a prompt; when that instance dies, nginx sends the session to the other one and the
turn still succeeds: computed again, or, with the Redis page tier, from the pages (and hybrid
snapshots) the dead instance left there."""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import MODEL, REPO, _find_binary

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"),
                                reason="nginx is not installed (scripts/setup.sh installs it)")

GREEDY = {"temperature": 0, "repeat_penalty": 2.0, "repeat_last_n": 64, "return_tokens": True}


def free_base_port():
    for _ in range(50):
        base = 20000 + (os.getpid() * 7 + int(time.time() * 1000)) % 20000
        ok = True
        for p in range(base, base + 4):  # nginx, two instances, Redis
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return base
        time.sleep(0.01)
    raise RuntimeError("no free ports")


def request(port, method, path, body=None, headers=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=hdrs)
        resp = conn.getresponse()
        text = resp.read().decode()
        return resp.status, json.loads(text) if text.startswith("{") or text.startswith("[") else text
    except (ConnectionError, OSError) as e:
        return 0, str(e)
    finally:
        conn.close()


def start_cluster(tmp_path, *serve_flags, model=MODEL, redis=False):
    base = free_base_port()
    env = dict(os.environ)
    bin_dir = os.path.dirname(os.path.abspath(_find_binary()))
    log = open(tmp_path / "cluster.log", "wb")
    proc = subprocess.Popen([os.path.join(REPO, "deploy", "local-cluster.sh"), "-n", "2", "-m", model, "--port",
                             str(base), "--bin", os.path.join(bin_dir, "agentkv"), *(["--redis"] if redis else []), "--", "-np", "1", "-t", "1",
                             *serve_flags],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            # The instances first, nginx only once both answer: a probe through nginx that reaches an
            # instance not yet listening marks it down for fail_timeout (10 s), and a test that then
            # kills the other one would get 502 from nginx.
            if all(request(p, "GET", "/health", timeout=2)[0] == 200 for p in (base + 1, base + 2, base)):
                break
            assert proc.poll() is None, open(tmp_path / "cluster.log").read()
            time.sleep(0.1)
        else:
            raise RuntimeError("cluster not ready: " + open(tmp_path / "cluster.log").read())
    except BaseException:
        stop_cluster(proc, log)
        raise
    return base, proc, log


def stop_cluster(proc, log):
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log.close()


@pytest.fixture()
def cluster(tmp_path):
    base, proc, log = start_cluster(tmp_path)
    try:
        yield base
    finally:
        stop_cluster(proc, log)


def kill_instance(port):
    """Stops the instance on `port` and waits until its process is gone. Waiting for /health to
    fail is not enough: a dying server can still accept a connection and then drop it, and nginx
    does not pass a POST it has already sent on to the next upstream (502; seen under load)."""
    pattern = "serve .*--port %d( |$)" % port
    subprocess.run(["pkill", "-f", pattern], check=False)
    deadline = time.time() + 20
    while subprocess.run(["pgrep", "-f", pattern], stdout=subprocess.DEVNULL).returncode == 0:
        assert time.time() < deadline, "instance on port %d did not exit" % port
        time.sleep(0.05)


def complete(port, prompt, session):
    status, body = request(port, "POST", "/completion", {"prompt": prompt, "n_predict": 4, **GREEDY},
                           headers={"X-Session-Id": session})
    assert status == 200, body
    return body


def test_sessions_stick_to_an_instance_and_move_when_it_dies(cluster, reference):
    nginx, instances = cluster, (cluster + 1, cluster + 2)
    prompts = {"session-%d" % i: reference[i]["prompt_tokens"] for i in range(4)}
    first = {s: complete(nginx, p, s) for s, p in prompts.items()}
    homes = {}
    for s, p in prompts.items():
        turn2 = p + first[s]["tokens"] + [11, 12, 13]
        second = complete(nginx, turn2, s)
        assert second["timings"]["cache_n"] >= len(p), (s, second["timings"])  # same instance: its cache
        # The routing signal: exactly one instance holds this conversation.
        held = [request(i, "POST", "/v1/cache/lookup", {"prompt": turn2})[1]["n_cached_tokens"] for i in instances]
        assert sorted(n > 0 for n in held) == [False, True], (s, held)
        homes[s] = (instances[held.index(max(held))], turn2 + second["tokens"])
    # The header names the session on the instance too.
    s0, (home, _) = "session-0", homes["session-0"]
    status, slots = request(home, "GET", "/slots")
    assert status == 200 and slots[0]["session_id"] in prompts, slots

    # The instance holding session-0 dies: nginx sends its next turn to the other one.
    kill_instance(home)
    turn3 = homes[s0][1] + [21, 22]
    third = complete(nginx, turn3, s0)
    assert third["timings"]["cache_n"] == 0  # computed again: this cluster has no shared page tier
    other = instances[1 - instances.index(home)]
    assert request(other, "POST", "/v1/cache/lookup", {"prompt": turn3})[1]["n_cached_tokens"] >= len(turn3) - 4


def test_session_header_and_cache_lookup_on_one_instance(tmp_path, reference):
    from conftest import Server
    server = Server(tmp_path, "-np", "2")
    try:
        prompt = reference[5]["prompt_tokens"]
        status, body = server.post("/v1/cache/lookup", {"prompt": prompt})
        assert status == 200 and body["n_cached_tokens"] == 0 and body["n_prompt_tokens"] == len(prompt), body
        status, body = server.request("POST", "/completion", {"prompt": prompt, "n_predict": 2, **GREEDY},
                                      headers={"X-Session-Id": "agent-7"})
        assert status == 200, body
        _, slots = server.get("/slots")
        assert [s["session_id"] for s in slots if s["id"] == body["id_slot"]] == ["agent-7"]
        status, body = server.post("/v1/cache/lookup", {"prompt": prompt + [5, 6]})
        assert status == 200 and body["n_cached_tokens"] == len(prompt), body
        assert body["n_cached_pages"] == len(prompt) // body["page_tokens"]
        status, body = server.post("/v1/cache/lookup", {"prompt": prompt, "cache_salt": "other-tenant"})
        assert status == 200 and body["n_cached_tokens"] == 0, body  # salts keep tenants apart here too
        status, body = server.post("/v1/cache/lookup", {"nothing": 1})
        assert status == 400, body
        status, body = server.post("/v1/cache/lookup", {"prompt": prompt, "n_predict": 3})
        assert status == 400 and "n_predict" in body["error"]["message"], body  # evaluates nothing
        status, body = server.request("POST", "/completion", {"prompt": prompt, "n_predict": 1},
                                      headers={"X-Session-Id": "x" * 300})
        assert status == 400 and "X-Session-Id" in body["error"]["message"], body
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["dense", "hybrid"])
def test_a_session_survives_its_instance_through_nginx_and_redis(tmp_path, reference, kind):
    """Issue 19's scenario: a 4-turn conversation with a session header; turns 1-2 on one
    instance, which is then killed; turns 3-4 reach the other through nginx and evaluate only their
    new tokens (the dead instance's pages, its last partial page and, hybrid, its recurrent
    snapshot come from Redis), with the single-instance texts."""
    from test_redis_tier import REDIS, Redis
    from conftest import FIXTURES
    if not os.path.exists(REDIS):
        pytest.skip("redis-server is not installed")
    model = MODEL if kind == "dense" else os.path.join(FIXTURES, "models", "qwen35moe-micro.gguf")
    base, proc, log = start_cluster(tmp_path, model=model, redis=True)  # the script starts Redis on base + 3
    redis = Redis(tmp_path, base + 3, start=False)
    try:
        nginx, instances = base, (base + 1, base + 2)
        turn = reference[5]["prompt_tokens"]
        answers, prompts = [], []
        for i in range(4):
            if i == 2:  # the instance holding the session dies, once its records are in Redis
                held = [request(p, "POST", "/v1/cache/lookup", {"prompt": turn})[1]["n_cached_tokens"] for p in instances]
                home = instances[held.index(max(held))]
                redis.settle(len(prompts[-1]) // 16)
                kill_instance(home)
            body = complete(nginx, turn, "agent-session")
            t = body["timings"]
            if i > 0:  # only the new tokens: the last answer token and the new text
                assert t["prompt_n"] == len(turn) - len(prompts[-1]) - 3, (i, t)
                assert t["cache_n"] == len(prompts[-1]) + 3, (i, t)
            prompts.append(turn)
            answers.append(body["tokens"])
            turn = turn + body["tokens"] + [30 + i, 40 + i, 50 + i]
    finally:
        stop_cluster(proc, log)
    # The same conversation on one instance without any cache gives the same texts.
    from conftest import Server
    alone = Server(tmp_path / "alone", "-np", "1", model=model)
    try:
        for i, p in enumerate(prompts):
            status, body = alone.post("/completion", {"prompt": p, "n_predict": 4, "cache_prompt": False, **GREEDY})
            assert status == 200 and body["tokens"] == answers[i], i
    finally:
        alone.stop()
