"""The calibrated KV type tqc3 end to end (docs/quant-types.md "Calibrated code (tqc3)"): a code
fitted with `agentkv kv-calibrate` serves completions, /props names it, sessions on one prefix hold
one copy of it at 3.25 bits per element, and the server refuses tqc3 without a code or with a
damaged one."""

import os
import re
import subprocess

from conftest import FIXTURES, REPO, Server, _find_binary, needs_fixtures
from test_shared_prefix import metric, system_prompt, text, tokenize

MODEL = os.path.join(FIXTURES, "models", "qwen3-tiny-q4_k_m.gguf")  # 4 layers, 2 KV heads of width 64
TEXT = os.path.join(REPO, "trained", "agentkv-tiny", "heldout.txt")
CELL_BYTES = 4 * 2 * 2 * 26  # layers x (K + V) x heads x 26 bytes per 64-wide tqc3 head row
pytestmark = needs_fixtures  # every test calibrates a code on the fixture model


def calibrate(tmp_path):
    out = tmp_path / "tiny.kvcode"
    run = subprocess.run([_find_binary(), "kv-calibrate", "-m", MODEL, "-f", TEXT, "-o", str(out), "--window", "256",
                          "--windows", "4"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    code_id = re.search(r"code id ([0-9a-f]{16})", run.stdout)
    assert code_id and out.exists(), run.stdout
    return out, int(code_id.group(1), 16)


def test_tqc3_serves_shares_its_prefix_and_names_its_code(tmp_path):
    code, code_id = calibrate(tmp_path)
    server = Server(tmp_path, "-np", "4", "-c", "4096", "--metrics", "-ctk", "tqc3", "-ctv", "tqc3", "--kv-code",
                    str(code), model=MODEL)
    try:
        status, props = server.get("/props")
        assert status == 200
        kv = props["kv_cache"]
        assert (kv["type_k"], kv["type_v"], kv["code_id"]) == ("tqc3", "tqc3", code_id), kv
        prefix = system_prompt(server, 5, 1024)
        first = None
        for i in range(4):
            prompt = prefix + " " + text(900 + i, 12)
            status, body = server.post("/completion", {"prompt": prompt, "n_predict": 4, "temperature": 0,
                                                       "session_id": "agent-%d" % i})
            assert status == 200, body
            assert body["tokens_predicted"] == 4
            if i == 0:
                first = metric(server, "memory_bytes")
                n_prompt = len(tokenize(server, prompt))
                assert n_prompt * CELL_BYTES <= first <= (n_prompt + 4) * CELL_BYTES, (first, n_prompt)
            else:
                assert body["timings"]["prompt_n"] <= len(tokenize(server, prompt)) - 1024 + 1, body["timings"]
        assert metric(server, "memory_bytes") <= first + 3 * 64 * CELL_BYTES  # one copy of the prefix
        server.stop()
        assert server.proc.returncode == 0, server.log()
    finally:
        server.stop()


def test_tqc3_without_its_code_or_with_a_damaged_one_is_refused(tmp_path):
    missing = subprocess.run([_find_binary(), "serve", "-m", MODEL, "-ctv", "tqc3", "--port", "0"],
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1 and "tqc3 needs --kv-code" in missing.stderr, missing.stderr
    code, _ = calibrate(tmp_path)
    data = bytearray(code.read_bytes())
    data[len(data) // 2] ^= 0x40
    bad = tmp_path / "bad.kvcode"
    bad.write_bytes(bytes(data))
    damaged = subprocess.run([_find_binary(), "serve", "-m", MODEL, "-ctk", "tqc3", "--kv-code", str(bad), "--port", "0"],
                             capture_output=True, text=True, timeout=30)
    assert damaged.returncode == 1 and "damaged" in damaged.stderr, damaged.stderr
