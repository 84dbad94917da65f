#!/usr/bin/env python3
"""Runs llama.cpp's own server test suite (tools/server/tests of a llama.cpp source tree, not
committed here) against agentkv or llama-server, and writes each test's outcome as JSON.

    tests/llama_server_suite/run_suite.py --llama-cpp ~/llama.cpp --server agentkv \
        --bin build/agentkv --out agentkv.json
    tests/llama_server_suite/run_suite.py --llama-cpp ~/llama.cpp --server llama \
        --bin ~/llama.cpp/build/bin/llama-server --out llama.json
    tests/llama_server_suite/compare.py llama.json agentkv.json     # the table of docs/server.md

The suite is copied into a scratch folder and adapted there, without touching its tests:
- `--hf-repo` / `--hf-file` become a local fixture model (server_shim.py, set as the suite's
  LLAMA_SERVER_BIN_PATH); the suite's conftest no longer pre-downloads every preset (its
  `ServerPreset.load_all()`), and `wget` is a stub that refuses: nothing is downloaded.
- `openai` (the OpenAI Python SDK, not packaged by Debian) is a stub whose client refuses on use:
  the tests that use it fail the same way on both servers and are reported as such.
Needs python3-pytest, python3-requests, python3-pytest-timeout (Debian packages).
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

WGET_STUB = '''"""Stub: the suite's model downloads are replaced by local models (server_shim.py)."""
def download(url, out=None):
    raise RuntimeError("download refused (no network; run_suite.py maps models to local files): " + url)
'''

OPENAI_STUB = '''"""Stub: the OpenAI Python SDK is not packaged by Debian and cannot be installed here."""
class OpenAI:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("the openai Python package is not installed (run_suite.py stub)")
'''


def prepare(llama_cpp, scratch):
    suite = os.path.join(llama_cpp, "tools", "server", "tests")
    tests = os.path.join(scratch, "tools", "server", "tests")
    shutil.copytree(suite, tests, ignore=shutil.ignore_patterns("tmp", "__pycache__", ".pytest_cache"))
    # Chat templates are read as ../../../models/templates/... from the tests folder.
    os.symlink(os.path.join(llama_cpp, "models"), os.path.join(scratch, "models"))
    with open(os.path.join(tests, "wget.py"), "w") as f:
        f.write(WGET_STUB)
    with open(os.path.join(tests, "openai.py"), "w") as f:
        f.write(OPENAI_STUB)
    conftest = os.path.join(tests, "conftest.py")
    text = open(conftest).read()
    if "ServerPreset.load_all()" not in text:
        sys.exit("run_suite.py: the suite's conftest.py has no ServerPreset.load_all() call to drop")
    with open(conftest, "w") as f:
        f.write(text.replace("ServerPreset.load_all()", "pass  # run_suite.py: models are local, nothing to download"))
    os.makedirs(os.path.join(tests, "tmp"), exist_ok=True)
    return tests


def wait_for_free_port(port=8080, timeout=60):
    """The suite's servers listen on 8080: a server of a previous run still closing would fail them."""
    deadline = time.time() + timeout
    while True:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
                return
            except OSError:
                if time.time() > deadline:
                    sys.exit("run_suite.py: port %d stays in use" % port)
        time.sleep(0.5)


def outcomes(junit_path):
    results = {}
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        name = case.get("classname", "").replace("unit.", "unit/") + "::" + case.get("name")
        name = re.sub(r"^unit/([a-z_0-9]+)::", r"unit/\1.py::", name)
        if case.find("skipped") is not None:
            outcome = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            node = case.find("failure") if case.find("failure") is not None else case.find("error")
            outcome = "failed"
            results[name] = {"outcome": outcome, "message": (node.get("message") or "")[:300]}
            continue
        else:
            outcome = "passed"
        results[name] = {"outcome": outcome}
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", required=True, help="a llama.cpp source tree (tools/server/tests inside)")
    ap.add_argument("--server", choices=["agentkv", "llama"], required=True)
    ap.add_argument("--bin", required=True, help="build/agentkv, or llama.cpp's llama-server")
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(REPO), "shared", "fixtures"))
    ap.add_argument("--out", required=True, help="JSON file: test id -> outcome")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test")
    ap.add_argument("pytest_args", nargs="*",
                    help="pytest arguments instead of the suite's default (unit -m 'not slow'), e.g. unit/test_basic.py")
    args = ap.parse_args()

    scratch = tempfile.mkdtemp(prefix="llama-server-suite-")
    try:
        tests = prepare(os.path.abspath(args.llama_cpp), scratch)
        junit = os.path.join(scratch, "junit.xml")
        env = dict(os.environ, LLAMA_SERVER_BIN_PATH=os.path.join(HERE, "server_shim.py"), SUITE_SERVER=args.server,
                   SUITE_BIN=os.path.abspath(args.bin), SUITE_FIXTURES=os.path.abspath(args.fixtures))
        env.pop("PORT", None)
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", "--timeout", str(args.timeout),
               "--junitxml", junit] + (args.pytest_args or ["unit", "-m", "not slow"])  # the suite's own default (tests.sh)
        wait_for_free_port()
        print("run_suite.py:", " ".join(cmd), "(in %s)" % tests, flush=True)
        subprocess.run(cmd, cwd=tests, env=env)
        results = outcomes(junit)
        with open(args.out, "w") as f:
            json.dump({"server": args.server, "bin": args.bin, "tests": results}, f, indent=1, sort_keys=True)
        counts = {}
        for r in results.values():
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        print("run_suite.py: %s: %s -> %s" % (args.server, counts, args.out))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
