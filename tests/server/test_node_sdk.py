"""Real clients: the OpenAI Node SDK (tests/server/node/sdk.test.mjs, and its Responses client in
responses.test.mjs) and the Anthropic TypeScript SDK (anthropic.test.mjs) against a live server.

The Node side checks chat completions (plain, streamed, aborted), text completions, typed errors
and llama-server-style /completion calls field by field. scripts/setup.sh installs Node and runs
`npm ci` in tests/server/node; only a machine without `node` skips this test.
"""

import os
import re
import shutil
import subprocess

import pytest

from conftest import FIXTURES, MODEL, REPO, Server, _find_binary

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
API_KEY = "node-sdk-key"
CHROMIUM = "/usr/bin/chromium"
TRAINED = os.path.join(REPO, "trained", "agentkv-tiny", "model.gguf")


def test_openai_node_sdk(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/setup.sh installs it)")
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")), \
        "run `npm ci` in tests/server/node (scripts/setup.sh does)"
    server = Server(tmp_path, "-np", "2", "-c", "2048", "--api-key", API_KEY)
    try:
        env = dict(os.environ,
                   AGENTKV_URL="http://127.0.0.1:%d" % server.port,
                   AGENTKV_API_KEY=API_KEY,
                   AGENTKV_MODEL=os.path.basename(MODEL),
                   AGENTKV_REFERENCE=os.path.join(FIXTURES, "reference", "qwen3-micro.json"))
        run = subprocess.run([node, "--test", "sdk.test.mjs"], cwd=NODE_DIR, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        output = run.stdout.decode("utf-8", errors="replace")
        assert run.returncode == 0, output + "\n--- server log ---\n" + server.log()[-4000:]
        passed = re.search(r"^# pass (\d+)$", output, re.M)
        assert "# fail 0" in output and passed and int(passed.group(1)) >= 8, output
        assert server.proc.poll() is None
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()


def run_node_test(tmp_path, script, package, min_pass, model=MODEL, server_args=(), **extra_env):
    """Runs one node test script against a fresh server (2 slots, an API key)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/setup.sh installs it)")
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", *package.split("/"))), \
        "run `npm ci` in tests/server/node (scripts/setup.sh does)"
    server = Server(tmp_path, "-np", "2", "-c", "4096", "--api-key", API_KEY, *server_args, model=model)
    try:
        env = dict(os.environ, **extra_env,
                   AGENTKV_URL="http://127.0.0.1:%d" % server.port,
                   AGENTKV_API_KEY=API_KEY,
                   AGENTKV_MODEL=os.path.basename(MODEL))
        run = subprocess.run([node, "--test", script], cwd=NODE_DIR, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180)
        output = run.stdout.decode("utf-8", errors="replace")
        assert run.returncode == 0, output + "\n--- server log ---\n" + server.log()[-4000:]
        passed = re.search(r"^# pass (\d+)$", output, re.M)
        assert "# fail 0" in output and passed and int(passed.group(1)) >= min_pass, output
        assert server.proc.poll() is None
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()


def test_anthropic_typescript_sdk(tmp_path):
    """@anthropic-ai/sdk (node/anthropic.test.mjs): a streamed tool-use conversation."""
    run_node_test(tmp_path, "anthropic.test.mjs", "@anthropic-ai/sdk", 2)


def test_openai_sdk_responses(tmp_path):
    """The OpenAI SDK's Responses client (node/responses.test.mjs): a streamed function-call conversation."""
    run_node_test(tmp_path, "responses.test.mjs", "openai", 1)


def test_web_ui_in_chromium(tmp_path):
    """The web UI at GET / in headless Chromium (node/webui.test.mjs): a streamed chat and the
    memory view's cache_n after a second turn, on the trained model (its answers are words)."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (scripts/setup.sh installs it)")
    run_node_test(tmp_path, "webui.test.mjs", "playwright-core", 1, model=TRAINED,
                  AGENTKV_SCREENSHOT=os.environ.get("AGENTKV_WEBUI_SCREENSHOT", str(tmp_path / "webui.png")))


def test_web_ui_attaches_images_in_chromium(tmp_path):
    """The web UI's image button (node/webui_vision.test.mjs) on a server with a vision projector:
    screenshots go as image_url parts and the second turn reuses the first."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (scripts/setup.sh installs it)")
    if not os.path.isdir(FIXTURES):
        pytest.skip("fixtures not found")
    projector = str(tmp_path / "qwen35-micro-vision.gguf")
    made = subprocess.run([_find_binary(), "mkmodel", "--preset", "qwen35-micro-vision", "-o", projector],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    images = os.path.join(REPO, "tests", "data", "vision")
    run_node_test(tmp_path, "webui_vision.test.mjs", "playwright-core", 1,
                  model=os.path.join(FIXTURES, "models", "qwen35-micro.gguf"), server_args=("--mmproj", projector),
                  AGENTKV_IMAGES=os.path.join(images, "mtmdref-64x48.png") + ":" + os.path.join(images, "mtmdref-40x72.png"))
