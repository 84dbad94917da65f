#!/usr/bin/env python3
"""First-token time of a request to a server holding many cached pages, against one holding none.

Issue 47's acceptance: the cache's bookkeeping must not make a request slower as it grows. This
starts `agentkv serve` twice on the same model and flags: once empty, once after filling the prefix
cache with --pages pages (distinct prompts of --fill-len tokens, each one ending, so its pages stay
cached), then times --repeat fresh prompts of --new tokens (no prefix in common with anything
cached) on each, and prints the medians and their ratio.

    bench/cached_pages_ttft.py --bin build/agentkv --model ../shared/fixtures/models/qwen3-micro.gguf \
        --pages 100000

Only the standard library is used. Token ids are sent as arrays (no tokenization), drawn from a
seeded generator so that runs are comparable.
"""

import argparse
import http.client
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

PAGE_TOKENS = 16  # the server's page size (PrefixCacheConfig::page_tokens)


class Server:
    def __init__(self, binary, model, ctx, threads):
        self.log = tempfile.NamedTemporaryFile(prefix="agentkv-ttft-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--port", "0", "-t", str(threads),
                                      "-c", str(ctx), "-np", "1", "--metrics"], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        self.port = None
        while time.time() < deadline and self.port is None:
            with open(self.log.name, errors="replace") as f:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                sys.exit("server exited early, see " + self.log.name)
            else:
                time.sleep(0.05)
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        sys.exit("server not ready, see " + self.log.name)

    def request(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, json.loads(data) if data else None

    def get(self, path):
        return self.request("GET", path)

    def pages_cached(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        m = re.search(r"^llamacpp:pages_cached (\S+)", text, re.M)
        return int(float(m.group(1))) if m else None

    def complete(self, tokens):
        """Returns (wall seconds to the answer of one token, the server's prompt_ms, tokens evaluated)."""
        t0 = time.perf_counter()
        status, out = self.request("POST", "/completion", {"prompt": tokens, "n_predict": 1, "temperature": 0})
        wall = time.perf_counter() - t0
        if status != 200:
            sys.exit("completion failed: %s %s" % (status, out))
        return wall, out["timings"]["prompt_ms"], out["timings"]["prompt_n"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def prompts(rng, n, length, first_ids):
    """n prompts of `length` ids whose first token is drawn from first_ids (each distinct)."""
    for i in range(n):
        yield [first_ids[i]] + [rng.randrange(1000, 100000) for _ in range(length - 1)]


def measure(server, rng, args, firsts):
    walls, prompt_ms = [], []
    for tokens in prompts(rng, args.repeat, args.new, firsts):
        wall, ms, n = server.complete(tokens)
        if n != args.new:
            sys.exit("expected %d tokens evaluated, the server evaluated %d" % (args.new, n))
        walls.append(wall)
        prompt_ms.append(ms)
    return statistics.median(walls), statistics.median(prompt_ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/agentkv")
    ap.add_argument("--model", required=True)
    ap.add_argument("--pages", type=int, default=100000)
    ap.add_argument("--fill-len", type=int, default=4096, help="tokens per filling prompt")
    ap.add_argument("--new", type=int, default=512, help="tokens of each timed prompt")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()

    n_fill = -(-args.pages * PAGE_TOKENS // args.fill_len)
    ctx = n_fill * args.fill_len + 8 * args.new + 4096
    # Distinct first tokens keep every prompt in its own chain: nothing timed shares a page.
    firsts = random.Random(7).sample(range(100000, 150000), n_fill + 2 * args.repeat)
    timed_firsts = firsts[n_fill:]
    results = {}
    for label, fill in (("empty", 0), ("filled", n_fill)):
        server = Server(args.bin, args.model, ctx, args.threads)
        try:
            rng = random.Random(11)
            t0 = time.time()
            for tokens in prompts(rng, fill, args.fill_len, firsts):
                server.complete(tokens)
            fill_s = time.time() - t0
            results[label] = measure(server, random.Random(13), args, timed_firsts)
            cached = server.pages_cached()
            print("%-6s: %d filling prompts in %.0f s, cached pages reported: %s; median wall %.1f ms, "
                  "prompt_ms %.1f" % (label, fill, fill_s, cached, results[label][0] * 1e3, results[label][1]))
        finally:
            server.stop()
    print("ratio filled / empty: wall %.3f, prompt_ms %.3f" % (results["filled"][0] / results["empty"][0],
                                                              results["filled"][1] / results["empty"][1]))


if __name__ == "__main__":
    main()
