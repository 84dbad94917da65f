#!/usr/bin/env python3
"""Cluster bench (issue 19): N `agentkv serve` instances behind nginx, optionally sharing a Redis
page tier, with many agent sessions replaying the sample agent trace concurrently.

Per routing configuration it reports the prompt tokens sent, the tokens served from a cache (the
sum of the responses' `timings.cache_n`), the hit rate (cached / prompt tokens) and the client's
time to first token (median, p90). Configurations (`--configs`, comma-separated):

  rr              nginx round-robin upstream (the shipped config without its `hash` line), no tier
  affinity        the shipped deploy/nginx/agentkv.conf: consistent hash on X-Session-Id, no tier
  affinity+redis  affinity, every instance started with --cache-redis (one redis-server)
  rr+redis        round-robin, with the Redis tier

Every configuration starts from nothing: fresh instances, a fresh redis-server (its own temporary
folder, `--save "" --appendonly no`), a fresh nginx; all on 127.0.0.1, free ports. Everything
started is stopped at the end of the configuration, on an error and on Ctrl-C / SIGTERM; the
whole run is bounded by --time-limit.

Workload. Session k (of --sessions) replays the first --steps steps of the trace
(docs/measurement.md, "Agent trace format"), token counts multiplied by --scale: step 0's depth is
the system prompt (the same token ids for every session), each step appends `new_tokens`
session-specific token ids (a per-session seed), asks for `answer_tokens` generated tokens
(greedy, ignore_eos) and appends what the server generated; a step whose depth falls below the
conversation so far is a compaction (system prompt + a fresh summary of the remaining depth).
Prompts are token ids (no chat template) sent to /completion with `stream: true`, the session's
name in the X-Session-Id header. --clients agents run at once: the turns are queued round by
round (turn t of every session, in an order shuffled per round with a fixed seed, so neither
routing lines up with the session numbers), and a session's turn waits for its previous turn.

TTFT is client-measured: from sending the request to nginx until the first streamed event that
carries a generated token (queueing in nginx and the instance, prompt evaluation, HTTP). The
server's own `timings.prompt_ms` is reported beside it (it starts after any tier fetch).

Checks, printed as warnings: cache_n + prompt_n = the prompt's length, and a streamed answer's
token ids number `tokens_predicted` (a stream that drops one makes the next prompt diverge from the
instance's cache inside that answer).

Standard library only. Example (the BENCHMARKS.md run, ~9 minutes on 2 vCPUs):
  python3 bench/cluster_bench.py -m ../shared/fixtures/models/qwen3-micro.gguf --out /tmp/cluster-bench
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_CONFIGS = ["rr", "affinity", "affinity+redis", "rr+redis"]
LABELS = {
    "rr": "round-robin, no shared tier",
    "affinity": "affinity (hash X-Session-Id)",
    "affinity+redis": "affinity + Redis tier",
    "rr+redis": "round-robin + Redis tier",
}


class BenchError(RuntimeError):
    pass


# ---------------------------------------------------------------- processes

class Procs:
    """Every process this bench starts, each in its own process group; stop_all() ends them."""

    def __init__(self):
        self.items = []  # (name, Popen, log file)
        self.lock = threading.Lock()

    def start(self, name, cmd, log_path):
        log = open(log_path, "wb")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        with self.lock:
            self.items.append((name, proc, log))
        return proc

    def stop_all(self):
        with self.lock:
            items, self.items = self.items, []
        for _, proc, _ in items:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.time() + 15
        for name, proc, log in items:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            log.close()


def free_ports(n):
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def http_get(port, path, timeout=5):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", errors="replace")
    except OSError as e:
        return 0, str(e)
    finally:
        conn.close()


def wait_ready(port, proc, log_path, what, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if http_get(port, "/health", timeout=2)[0] == 200:
            return
        if proc.poll() is not None:
            raise BenchError("%s exited (status %s):\n%s" % (what, proc.returncode, tail(log_path)))
        time.sleep(0.1)
    raise BenchError("%s not ready after %d s:\n%s" % (what, timeout, tail(log_path)))


def tail(path, n=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def redis_command(port, *args):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(("*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args)).encode())
        return s.recv(65536).decode(errors="replace").strip()


def start_redis(procs, binary, port, work):
    log = os.path.join(work, "redis.log")
    folder = os.path.join(work, "redis")
    os.makedirs(folder)
    proc = procs.start("redis", [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                 "--dir", folder], log)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            if redis_command(port, "PING") == "+PONG":
                return
        except OSError:
            pass
        if proc.poll() is not None:
            raise BenchError("redis-server exited:\n" + tail(log))
        time.sleep(0.05)
    raise BenchError("redis-server did not answer PING:\n" + tail(log))


def nginx_conf(template, ports, listen, work, round_robin):
    """The shipped config with this run's ports and nginx's files under work (as
    deploy/local-cluster.sh writes it); round_robin drops the `hash` line (nginx's default
    round-robin balancing). Both add a response header naming the instance that answered."""
    out, servers_done = [], False
    for line in template.splitlines():
        if re.search(r"server 127\.0\.0\.1:\d+ max_fails", line):
            if not servers_done:
                out += ["    server 127.0.0.1:%d max_fails=1 fail_timeout=10s;" % p for p in ports]
                servers_done = True
            continue
        if round_robin and re.match(r"\s*hash \$agentkv_session consistent;", line):
            out.append("    # round-robin: the shipped `hash $agentkv_session consistent;` removed by cluster_bench.py")
            continue
        if re.match(r"\s*listen 127\.0\.0\.1:", line):
            line = re.sub(r"\d+;", "%d;" % listen, line)
        if line.startswith("http {"):
            out += ["pid %s/nginx.pid;" % work, "error_log %s/nginx-error.log;" % work, line,
                    "  access_log %s/nginx-access.log;" % work,
                    "  client_body_temp_path %s/body; proxy_temp_path %s/proxy;" % (work, work),
                    "  fastcgi_temp_path %s/fcgi; uwsgi_temp_path %s/uwsgi; scgi_temp_path %s/scgi;" % (work, work, work)]
            continue
        if re.match(r"\s*proxy_pass http://agentkv;", line):
            out += [line, "      add_header X-Agentkv-Upstream $upstream_addr always;  # cluster_bench.py"]
            continue
        out.append(line)
    if not servers_done or (not round_robin and not any("hash $agentkv_session" in l for l in out)):
        raise BenchError("deploy/nginx/agentkv.conf has changed shape: cannot adapt it")
    return "\n".join(out) + "\n"


def scrape_metrics(port):
    status, text = http_get(port, "/metrics", timeout=10)
    if status != 200:
        return {}
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        try:
            values[name.split(":")[-1]] = float(value)
        except ValueError:
            pass
    return values


# ---------------------------------------------------------------- workload

def load_trace(path):
    steps = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                s = json.loads(line)
                steps.append((int(s["depth"]), int(s["new_tokens"]), int(s.get("answer_tokens", 1))))
            except (ValueError, KeyError) as e:
                raise BenchError("%s:%d: %s" % (path, n, e))
    return steps


def scaled(n, scale):
    return max(1, int(round(n * scale)))


class Session:
    """One agent's conversation: token ids, grown by each turn's new tokens and the answer."""

    def __init__(self, index, system, plan, vocab, seed):
        self.name = "agent-%02d" % index
        self.rng = random.Random(seed * 1000003 + index)
        self.system = system
        self.plan = plan  # per turn: (compaction summary length or None, new tokens, n_predict)
        self.vocab = vocab
        self.conv = list(system)
        self.prev_cacheable = len(system)  # what one perfect shared cache could hold of the next prompt
        self.done_turn = -1
        self.cond = threading.Condition()

    def tokens(self, n):
        lo, hi = self.vocab
        return [self.rng.randrange(lo, hi) for _ in range(n)]

    def prompt_for(self, turn):
        summary, new, _ = self.plan[turn]
        if summary is not None:  # compaction: system prompt + a summary of the history
            self.conv = list(self.system) + self.tokens(summary)
            self.prev_cacheable = len(self.system)
        return self.conv + self.tokens(new)


def build_plan(trace, steps, scale):
    """Scaled turns of the trace's first `steps` steps: system prompt length and per turn
    (summary length at a compaction or None, new tokens, answer tokens)."""
    use = trace[:steps]
    system = scaled(use[0][0], scale)
    plan, expected = [], None
    for i, (depth, new, answer) in enumerate(use):
        summary = None
        if i > 0 and depth < expected:
            summary = max(0, scaled(depth, scale) - system)
        plan.append((summary, scaled(new, scale), scaled(answer, scale)))
        expected = depth + new + answer
    return system, plan


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def stream_completion(port, session, prompt, n_predict, timeout):
    body = json.dumps({"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "temperature": 0,
                       "cache_prompt": True, "stream": True, "return_tokens": True}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    ttft, tokens, final = None, [], None
    try:
        conn.request("POST", "/completion", body=body,
                     headers={"Content-Type": "application/json", "X-Session-Id": session})
        resp = conn.getresponse()
        upstream = resp.getheader("X-Agentkv-Upstream", "")
        if resp.status != 200:
            raise BenchError("HTTP %d from %s: %s" % (resp.status, upstream or "nginx", resp.read()[:500]))
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                break
            event = json.loads(payload)
            if "error" in event:
                raise BenchError("error event from %s: %s" % (upstream, event["error"]))
            if event.get("tokens"):
                if ttft is None:
                    ttft = time.perf_counter() - t0
                tokens += event["tokens"]
            if event.get("stop"):
                final = event
                break
    finally:
        conn.close()
    total = time.perf_counter() - t0
    if final is None or "timings" not in final:
        raise BenchError("stream from %s ended without a final event" % upstream)
    return {"ttft_s": ttft if ttft is not None else total, "total_s": total, "tokens": tokens,
            "n_decoded": final.get("tokens_predicted", len(tokens)), "timings": final["timings"], "upstream": upstream}


def replay(nginx_port, sessions, n_turns, clients, seed, timeout, deadline):
    rng = random.Random(seed)
    queue = []
    for t in range(n_turns):
        order = list(range(len(sessions)))
        rng.shuffle(order)
        queue += [(t, s) for s in order]
    lock = threading.Lock()
    pos = [0]
    rows, errors = [], []
    last_upstream = {}
    first_sent = [False]

    def worker():
        while True:
            with lock:
                if errors or pos[0] >= len(queue):
                    return
                turn, k = queue[pos[0]]
                pos[0] += 1
            sess = sessions[k]
            with sess.cond:  # the session's previous turn must be answered first
                while sess.done_turn < turn - 1 and not errors:
                    sess.cond.wait(1.0)
            if errors:
                return
            try:
                if time.time() > deadline:
                    raise BenchError("time limit reached")
                prompt = sess.prompt_for(turn)
                with lock:
                    ideal = sess.prev_cacheable if first_sent[0] else 0  # the very first request finds nothing
                    first_sent[0] = True
                n_predict = sess.plan[turn][2]
                r = stream_completion(nginx_port, sess.name, prompt, n_predict, timeout)
                t = r["timings"]
                with lock:
                    same = last_upstream.get(k) == r["upstream"] if turn > 0 else None
                    last_upstream[k] = r["upstream"]
                rows.append({"session": sess.name, "turn": turn, "prompt_tokens": len(prompt),
                             "cache_n": t.get("cache_n", 0), "prompt_n": t.get("prompt_n", 0),
                             "prompt_ms": t.get("prompt_ms", 0.0), "ttft_s": r["ttft_s"], "total_s": r["total_s"],
                             "generated": len(r["tokens"]), "tokens_predicted": r["n_decoded"], "n_predict": n_predict, "ideal_cached": ideal,
                             "upstream": r["upstream"], "same_instance_as_previous_turn": same})
                # What the server now holds: the prompt and the answer but its last token (never evaluated).
                sess.conv = prompt + r["tokens"]
                sess.prev_cacheable = len(sess.conv) - 1
            except BaseException as e:  # noqa: B902 - recorded, the other workers stop
                with lock:
                    errors.append(e)
            with sess.cond:
                sess.done_turn = turn
                sess.cond.notify_all()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        while th.is_alive():
            th.join(0.5)
    if errors:
        raise errors[0]
    return rows


# ---------------------------------------------------------------- one configuration

def run_config(name, args, trace_plan, deadline, out_dir):
    system_len, plan = trace_plan
    use_redis = name.endswith("+redis")
    round_robin = name.startswith("rr")
    procs = Procs()
    work = tempfile.mkdtemp(prefix="agentkv-cluster-bench-")
    # nginx started as root runs its worker as another user (nobody), which must reach the body
    # temp folder under work: a request body beyond client_body_buffer_size (16 KiB, a prompt of
    # ~2.5k token ids) is written there, and a 0700 folder answers it with a 500.
    os.chmod(work, 0o755)
    try:
        ports = free_ports(args.instances + 2)
        inst_ports, nginx_port, redis_port = ports[:args.instances], ports[args.instances], ports[-1]
        extra = []
        if use_redis:
            start_redis(procs, args.redis, redis_port, work)
            extra = ["--cache-redis", "redis://127.0.0.1:%d" % redis_port]
        started = []
        for i, p in enumerate(inst_ports):
            log = os.path.join(work, "agentkv-%d.log" % i)
            cmd = [args.bin, "serve", "-m", args.model, "--port", str(p), "-np", str(args.np), "-c", str(args.ctx),
                   "-t", str(args.threads), "--metrics", *extra, *args.serve_args]
            started.append((procs.start("agentkv-%d" % i, cmd, log), p, log))
        for proc, p, log in started:
            wait_ready(p, proc, log, "agentkv on port %d" % p)
        with open(os.path.join(REPO, "deploy", "nginx", "agentkv.conf")) as f:
            conf = nginx_conf(f.read(), inst_ports, nginx_port, work, round_robin)
        conf_path = os.path.join(work, "nginx.conf")
        with open(conf_path, "w") as f:
            f.write(conf)
        nginx_log = os.path.join(work, "nginx.out")
        nginx = procs.start("nginx", [args.nginx, "-p", work, "-c", conf_path, "-g", "daemon off;"], nginx_log)
        wait_ready(nginx_port, nginx, nginx_log, "nginx", timeout=20)

        sessions = []
        sys_rng = random.Random(args.seed)
        system = [sys_rng.randrange(*args.vocab) for _ in range(system_len)]
        for k in range(args.sessions):
            sessions.append(Session(k, system, plan, args.vocab, args.seed))
        load0 = os.getloadavg()
        t0 = time.time()
        rows = replay(nginx_port, sessions, len(plan), args.clients, args.seed, args.request_timeout, deadline)
        wall = time.time() - t0
        load1 = os.getloadavg()
        if use_redis:  # let the writers finish before reading the key count
            time.sleep(0.5)
        metrics = [scrape_metrics(p) for p in inst_ports]
        redis_keys = None
        if use_redis:
            reply = redis_command(redis_port, "DBSIZE")
            redis_keys = int(reply[1:]) if reply.startswith(":") else reply
        logs = {}
        for i in range(args.instances):
            logs["agentkv-%d" % i] = open(os.path.join(work, "agentkv-%d.log" % i), errors="replace").read()
    finally:
        procs.stop_all()
        if out_dir:  # the logs are kept, also when the configuration failed
            keep = os.path.join(out_dir, "logs", name.replace("+", "-"))
            os.makedirs(keep, exist_ok=True)
            for fname in os.listdir(work):
                src = os.path.join(work, fname)
                if os.path.isfile(src) and (fname.endswith(".log") or fname in ("nginx.conf", "nginx.out")):
                    shutil.copy(src, keep)
        shutil.rmtree(work, ignore_errors=True)
    return summarize(name, rows, metrics, logs, wall, load0, load1, redis_keys, inst_ports)


def summarize(name, rows, metrics, logs, wall, load0, load1, redis_keys, inst_ports):
    prompt = sum(r["prompt_tokens"] for r in rows)
    cached = sum(r["cache_n"] for r in rows)
    evaluated = sum(r["prompt_n"] for r in rows)
    ideal = sum(r["ideal_cached"] for r in rows)
    later = [r for r in rows if r["turn"] > 0]
    same = [r["same_instance_as_previous_turn"] for r in later]
    mismatched = [r for r in rows if r["cache_n"] + r["prompt_n"] != r["prompt_tokens"]]
    # Streams that carried fewer token ids than the server generated: the next prompt then
    # diverges from the instance's cache one token into that answer.
    short_streams = [r for r in rows if r["generated"] != r["tokens_predicted"]]
    ttft = [r["ttft_s"] for r in rows]
    msum = lambda key: sum(m.get(key, 0.0) for m in metrics)  # noqa: E731
    fetched_lines = sum(len(re.findall(r"fetched \d+ pages", text)) for text in logs.values())
    tier_failures = sum(len(re.findall(r"computing instead", text)) for text in logs.values())
    per_instance = [sum(1 for r in rows if r["upstream"] == "127.0.0.1:%d" % p) for p in inst_ports]
    return {
        "config": name,
        "label": LABELS[name],
        "requests": len(rows),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "evaluated_tokens": evaluated,
        "hit_rate": cached / prompt if prompt else 0.0,
        "ideal_cached_tokens": ideal,
        "ideal_hit_rate": ideal / prompt if prompt else 0.0,
        "hit_rate_later_turns": (sum(r["cache_n"] for r in later) / sum(r["prompt_tokens"] for r in later)) if later else 0.0,
        "ttft_median_s": statistics.median(ttft) if ttft else float("nan"),
        "ttft_p90_s": percentile(ttft, 0.9),
        "prompt_ms_median": statistics.median(r["prompt_ms"] for r in rows) if rows else float("nan"),
        "prompt_ms_p90": percentile([r["prompt_ms"] for r in rows], 0.9),
        "same_instance_fraction": (sum(1 for s in same if s) / len(same)) if same else None,
        "requests_per_instance": per_instance,
        "wall_s": wall,
        "loadavg_before": load0,
        "loadavg_after": load1,
        "token_count_mismatches": len(mismatched),
        "streams_missing_tokens": len(short_streams),
        "tier_pages_sent": msum("tier_pages_sent_total"),
        "tier_pages_fetched": msum("tier_pages_fetched_total"),
        "tier_pages_refused": msum("tier_pages_refused_total"),
        "tier_fetch_log_lines": fetched_lines,
        "tier_failure_log_lines": tier_failures,
        "redis_keys": redis_keys,
        "prefix_cache_hits_total": msum("prefix_cache_hits_total"),
        "prefix_cache_queries_total": msum("prefix_cache_queries_total"),
        "rows": rows,
    }


def table(results):
    head = ("| configuration | requests | prompt tokens | from cache | hit rate | ideal | TTFT median | TTFT p90 "
            "| prompt_ms median | same instance | requests per instance | tier pages fetched | wall |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
    lines = []
    for r in results:
        same = "—" if r["same_instance_fraction"] is None else "%.0f %%" % (100 * r["same_instance_fraction"])
        fetched = "%d" % r["tier_pages_fetched"] if r["config"].endswith("+redis") else "—"
        lines.append("| %s | %d | %d | %d | **%.1f %%** | %.1f %% | %.0f ms | %.0f ms | %.0f ms | %s | %s | %s | %.0f s |" % (
            r["label"], r["requests"], r["prompt_tokens"], r["cached_tokens"], 100 * r["hit_rate"],
            100 * r["ideal_hit_rate"], 1000 * r["ttft_median_s"], 1000 * r["ttft_p90_s"], r["prompt_ms_median"], same,
            "/".join(str(n) for n in r["requests_per_instance"]), fetched, r["wall_s"]))
    return head + "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "agentkv"))
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--trace", default=os.path.join(REPO, "bench", "traces", "agent-sample.jsonl"))
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--steps", type=int, default=12, help="the first N steps of the trace per session (default 12)")
    ap.add_argument("--scale", type=float, default=0.5, help="token counts of the trace multiplied by this (default 0.5)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent agents (default 8)")
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS), help="comma-separated: " + ", ".join(ALL_CONFIGS))
    ap.add_argument("-np", dest="np", type=int, default=4, help="slots per instance (default 4)")
    ap.add_argument("-c", dest="ctx", type=int, default=65536, help="KV cells per instance (default 65536)")
    ap.add_argument("-t", dest="threads", type=int, default=1, help="threads per instance (default 1)")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--vocab", default="100,20000", help="token id range LO,HI of the generated text (default 100,20000)")
    ap.add_argument("--redis", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--request-timeout", type=float, default=300.0)
    ap.add_argument("--time-limit", type=float, default=1800.0, help="the whole run, seconds (default 1800)")
    ap.add_argument("--out", help="folder for results.json, summary.md and the servers' logs")
    ap.add_argument("serve_args", nargs="*", help="after --: more `agentkv serve` flags for every instance")
    args = ap.parse_args()
    args.vocab = tuple(int(x) for x in args.vocab.split(","))
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in configs:
        if c not in ALL_CONFIGS:
            ap.error("unknown configuration %r (known: %s)" % (c, ", ".join(ALL_CONFIGS)))
    for path, what in ((args.bin, "--bin"), (args.model, "-m"), (args.nginx, "--nginx")):
        if not os.path.exists(path):
            ap.error("%s: %s does not exist" % (what, path))
    if any(c.endswith("+redis") for c in configs) and not os.path.exists(args.redis):
        ap.error("--redis: %s does not exist (scripts/setup.sh installs redis-server)" % args.redis)

    trace = load_trace(args.trace)
    if args.steps < 1 or args.steps > len(trace):
        ap.error("--steps must be in [1, %d]" % len(trace))
    system_len, plan = build_plan(trace, args.steps, args.scale)
    per_session_max = system_len + sum((s or 0) + n + a for s, n, a in plan)
    scaling = ("first %d of %d trace steps per session, token counts x %g: system prompt %d tokens, %d turns per "
               "session, prompts up to %d tokens, answers %d-%d tokens" % (
                   args.steps, len(trace), args.scale, system_len, len(plan), max(
                       len_prompt for len_prompt in _prompt_lengths(system_len, plan)),
                   min(a for _, _, a in plan), max(a for _, _, a in plan)))
    print("cluster bench: %d instances (-np %d -c %d -t %d), %d sessions, %d concurrent clients; %s" % (
        args.instances, args.np, args.ctx, args.threads, args.sessions, args.clients, scaling), flush=True)
    if per_session_max > args.ctx:
        print("warning: a session's conversation (%d tokens) exceeds -c %d" % (per_session_max, args.ctx))

    deadline = time.time() + args.time_limit
    if args.out:
        os.makedirs(args.out, exist_ok=True)

    def on_term(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # also when started with SIGINT ignored (`&`)
        signal.signal(sig, on_term)

    results = []
    t_start = time.time()
    try:
        for c in configs:
            print("== %s: %s" % (c, LABELS[c]), flush=True)
            r = run_config(c, args, (system_len, plan), deadline, args.out)
            results.append(r)
            print("   %d requests in %.1f s, hit rate %.1f %% (ideal %.1f %%), TTFT median %.0f ms p90 %.0f ms, "
                  "load %.2f -> %.2f%s" % (
                      r["requests"], r["wall_s"], 100 * r["hit_rate"], 100 * r["ideal_hit_rate"],
                      1000 * r["ttft_median_s"], 1000 * r["ttft_p90_s"], r["loadavg_before"][0], r["loadavg_after"][0],
                      ", tier pages fetched %d / sent %d, redis keys %s" % (
                          r["tier_pages_fetched"], r["tier_pages_sent"], r["redis_keys"]) if c.endswith("+redis") else ""),
                  flush=True)
            if r["streams_missing_tokens"]:
                print("   warning: %d streamed answers carried fewer token ids than tokens_predicted (%s)" % (
                    r["streams_missing_tokens"], ", ".join("%s turn %d: %d of %d" % (
                        x["session"], x["turn"], x["generated"], x["tokens_predicted"])
                        for x in r["rows"] if x["generated"] != x["tokens_predicted"])))
            if r["token_count_mismatches"]:
                print("   warning: %d responses with cache_n + prompt_n != prompt tokens" % r["token_count_mismatches"])
    except KeyboardInterrupt:
        print("interrupted: every process started was stopped", file=sys.stderr)
        return 130
    except BenchError as e:
        print("cluster bench failed: %s" % e, file=sys.stderr)
        return 1
    total = time.time() - t_start

    md = ["Cluster bench: %d instances of `%s`, %d sessions, %d concurrent clients, %s." % (
        args.instances, os.path.basename(args.model), args.sessions, args.clients, scaling),
        "TTFT: client-measured, request sent to nginx -> first streamed token. hit rate = sum(cache_n) / prompt "
        "tokens; ideal = what one shared cache could serve (everything a session sent before, exact tokens; the "
        "system prompt for a session's first turn); same instance = later turns that landed on the instance of the "
        "session's previous turn. Whole run %.0f s." % total, "", table(results)]
    summary = "\n".join(md)
    print()
    print(summary)
    if args.out:
        setup = {k: v for k, v in vars(args).items() if k != "serve_args"}
        setup["serve_args"] = args.serve_args
        setup["scaling"] = scaling
        setup["system_prompt_tokens"] = system_len
        setup["plan"] = plan
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"setup": setup, "total_s": total, "results": results}, f, indent=1)
        with open(os.path.join(args.out, "summary.md"), "w") as f:
            f.write(summary)
        print("wrote %s/results.json, summary.md, logs/" % args.out)
    return 0


def _prompt_lengths(system_len, plan):
    conv = system_len
    for summary, new, answer in plan:
        if summary is not None:
            conv = system_len + summary
        yield conv + new
        conv += new + answer


if __name__ == "__main__":
    sys.exit(main())
