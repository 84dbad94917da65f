#!/usr/bin/env python3
"""Speculative decoding end to end (issue 51, BENCHMARKS.md "Speculative decoding in the server"):
agentkv serve and llama-server side by side on one model and one agent-edit task, greedy, one
client. The task: the context holds a file, and the answer writes it again with two lines changed
(the prompt starts the copy with the first changed line) — what an agent does when it re-emits an
edited file. Each configuration is a fresh server on 127.0.0.1; the request runs --runs times after
one warm-up, and the median decode rate (timings.predicted_per_second) is reported with the drafts
tried / accepted and whether the answer equals the configuration without drafts.

    bench/spec_server_bench.py --agentkv build/agentkv --llama-server PEER/build/bin/llama-server \\
        --model trained/agentkv-tiny/model.gguf [--file trained/agentkv-tiny/heldout.txt] \\
        [--tokens 300] [--runs 5] [--threads 2] [--draft-model SMALL.gguf] [--only-draft-model]

--draft-model adds draft-simple rows (-md): agentkv's (adaptive length, p_min 0.75; and a fixed 4
drafts a step at p_min 0) and llama.cpp's with its defaults (n_max 3, p_min 0) and at n_max 4.

Without --llama-server only agentkv's rows are measured.
"""

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def agent_edit_prompt(path, file_chars):
    with open(path) as f:
        text = f.read()
    start = text.find("\n", len(text) // 3) + 1  # a file-sized piece from the middle, whole lines
    end = text.rfind("\n", 0, start + file_chars) + 1
    original = text[start:end]
    lines = original.split("\n")
    edited = list(lines)
    # Two lines changed, as an edit would: one near the start, one in the middle.
    for at in (2, len(lines) // 2):
        edited[at] = edited[at] + "  # changed"
    head = "\n".join(edited[:3]) + "\n"  # the copy begins through the first changed line
    return original + "\n\n# edited version\n" + head


class Server:
    def __init__(self, cmd, log_path):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            with open(log_path) as f:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)|server is listening on http://127\.0\.0\.1:(\d+)",
                              f.read())
            if m:
                self.port = int(m.group(1) or m.group(2))
                break
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + open(log_path).read()[-2000:])
            time.sleep(0.1)
        while time.time() < deadline:
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server not ready: " + open(log_path).read()[-2000:])

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data.startswith(b"{") or data.startswith(b"[") else data)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def measure(server, prompt, n_tokens, runs, extra):
    body = {"prompt": prompt, "n_predict": n_tokens, "temperature": 0, "return_tokens": True, "cache_prompt": True,
            "ignore_eos": True, **extra}
    server.request("POST", "/completion", body)  # warm-up: the prompt is cached from here on
    rates, tokens, timings = [], None, None
    for _ in range(runs):
        status, out = server.request("POST", "/completion", body)
        if status != 200:
            raise RuntimeError(out)
        rates.append(out["timings"]["predicted_per_second"])
        tokens, timings = out.get("tokens"), out["timings"]
    return statistics.median(rates), tokens, timings


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentkv", required=True)
    ap.add_argument("--llama-server")
    ap.add_argument("--model", required=True)
    ap.add_argument("--file", default="trained/agentkv-tiny/heldout.txt")
    ap.add_argument("--file-chars", type=int, default=1000)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft-model")
    ap.add_argument("--only-draft-model", action="store_true", help="skip the n-gram rows")
    a = ap.parse_args()
    prompt = agent_edit_prompt(a.file, a.file_chars)
    tmp = tempfile.mkdtemp(prefix="spec-bench-")
    common = ["-m", a.model, "--port", "0", "-t", str(a.threads), "-c", "4096", "-np", "1"]
    configs = [("agentkv", "none", [a.agentkv, "serve", *common])]
    if not a.only_draft_model:
        configs += [("agentkv", "ngram-simple", [a.agentkv, "serve", *common, "--spec-type", "ngram-simple"]),
                    ("agentkv", "ngram-simple, fixed n_max 32", [a.agentkv, "serve", *common, "--spec-type", "ngram-simple"])]
    if a.draft_model:
        configs += [("agentkv", "draft-simple", [a.agentkv, "serve", *common, "-md", a.draft_model]),
                    ("agentkv", "draft-simple, fixed n_max 4 p_min 0", [a.agentkv, "serve", *common, "-md", a.draft_model,
                                                                        "--draft-max", "4", "--draft-p-min", "0"])]
    if a.llama_server:
        # No reasoning parsing: /completion's text is the model's (a random-weight model's output
        # otherwise fails llama-server's format check with a 500).
        llama = [a.llama_server, *common, "--host", "127.0.0.1", "--no-webui", "--reasoning-format", "none"]
        configs.append(("llama.cpp", "none", llama))
        if not a.only_draft_model:
            for kind in ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]:
                configs.append(("llama.cpp", kind, [*llama, "--spec-type", kind]))
        if a.draft_model:
            configs += [("llama.cpp", "draft-simple (defaults)", [*llama, "-md", a.draft_model, "--spec-type", "draft-simple"]),
                        ("llama.cpp", "draft-simple, n_max 4 p_min 0",
                         [*llama, "-md", a.draft_model, "--spec-type", "draft-simple", "--spec-draft-n-max", "4",
                          "--spec-draft-p-min", "0"])]
    rows, plain = [], {}
    for engine, kind, cmd in configs:
        server = Server(cmd, os.path.join(tmp, "%s-%s.log" % (engine, kind)))
        try:
            # "fixed": n_max drafts whenever found (speculative.adaptive false), the length policy off
            extra = {"speculative.adaptive": False} if "fixed" in kind else {}
            rate, tokens, t = measure(server, prompt, a.tokens, a.runs, extra)
        finally:
            server.stop()
        if kind == "none":
            plain[engine] = (rate, tokens)
        base_rate, base_tokens = plain[engine]
        rows.append((engine, kind, rate, rate / base_rate, t.get("draft_n", 0), t.get("draft_n_accepted", 0),
                     "yes" if tokens == base_tokens else "NO"))
        print("%-9s %-14s %8.1f t/s" % (engine, kind, rate), file=sys.stderr)
    print("| engine | --spec-type | tg t/s (median of %d) | × its plain | drafts tried | accepted | same tokens as plain |"
          % a.runs)
    print("|---|---|---:|---:|---:|---:|---|")
    for engine, kind, rate, ratio, drafted, accepted, same in rows:
        print("| %s | %s | %.1f | %.2f | %d | %d | %s |" % (engine, kind, rate, ratio, drafted, accepted, same))


if __name__ == "__main__":
    main()
