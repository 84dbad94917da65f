"""An agent loop with the OpenAI Node SDK (tests/server/node/agent.test.mjs): 10 tools,
tool_choice "required", 6 turns, streamed and not, on the dense and the hybrid fixture models and the
Qwen3-MoE, Llama 3, Mistral and gpt-oss presets (gpt-oss: harmony, an analysis message bounded by
--reasoning-budget 16 before each call, sent back as reasoning_content). Every reply is valid tool calls; from turn 2 on the previous
answer is not evaluated again (for Llama 3 and Mistral Small 3.2, whose templates re-render arguments
with tojson, because the tool grammar writes them with tojson's spacing; for Mistral, whose markers
[TOOL_CALLS] / [CALL_ID] / [ARGS] are control tokens, because the server keeps their text)."""

import os
import re
import shutil
import subprocess

import pytest

from conftest import Server, model_file

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
MODELS = ["dense", "hybrid", "qwen3moe", "llama", "mistral", "gpt-oss"]


@pytest.mark.parametrize("kind", MODELS)
def test_agent_loop_node_sdk(tmp_path, kind):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/setup.sh installs it)")
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")), \
        "run `npm ci` in tests/server/node (scripts/setup.sh does)"
    # gpt-oss (harmony): its grammar lets an analysis message come before the call, which a
    # random-weight model never ends by itself; a reasoning budget ends it (llama-server's flag).
    budget = ["--reasoning-budget", "16"] if kind == "gpt-oss" else []
    server = Server(tmp_path, "-np", "2", "-c", "16384", *budget, model=model_file(kind))
    try:
        env = dict(os.environ, AGENTKV_URL="http://127.0.0.1:%d" % server.port, AGENTKV_KIND=kind)
        run = subprocess.run([node, "--test", "agent.test.mjs"], cwd=NODE_DIR, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=400)
        output = run.stdout.decode("utf-8", errors="replace")
        assert run.returncode == 0, output + "\n--- server log ---\n" + server.log()[-6000:]
        passed = re.search(r"^# pass (\d+)$", output, re.M)
        assert "# fail 0" in output and passed and int(passed.group(1)) == 2, output
        print(output)
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()
