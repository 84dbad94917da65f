"""`agentkv run --mmproj P --image F`: a Qwen3.5 fixture with its projector preset reads PNG images
(llama.cpp's <__media__> markers); what it refuses, it refuses with a reason and exit status 1.
Exactness against llama.cpp is tests/fidelity_vision_test.cpp's."""

import os
import subprocess

import pytest

from conftest import FIXTURES, REPO, _find_binary, needs_fixtures

QWEN35 = os.path.join(FIXTURES, "models", "qwen35-micro.gguf")
QWEN3 = os.path.join(FIXTURES, "models", "qwen3-micro.gguf")
IMAGES = os.path.join(REPO, "tests", "data", "vision")
PROMPT = "<|im_start|>user\nLook: <__media__>\nDescribe it.<|im_end|>\n<|im_start|>assistant\n"


def agentkv(*args, timeout=120):
    return subprocess.run([_find_binary(), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def projector(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vision") / "qwen35-micro-vision.gguf")
    r = agentkv("mkmodel", "--preset", "qwen35-micro-vision", "-o", path)
    assert r.returncode == 0, r.stderr
    return path


def run(projector, *images, prompt=PROMPT, model=QWEN35):
    args = ["run", "-m", model, "--mmproj", projector, "-p", prompt, "-n", "12", "--temp", "0"]
    for image in images:
        args += ["--image", image]
    return agentkv(*args)


@needs_fixtures
def test_an_image_is_read_and_changes_the_answer(projector):
    wide = run(projector, os.path.join(IMAGES, "mtmdref-64x48.png"))
    assert wide.returncode == 0, wide.stderr
    assert "64x48 -> 128x96 pixels, 12 tokens" in wide.stderr
    again = run(projector, os.path.join(IMAGES, "mtmdref-64x48.png"))
    assert again.stdout == wide.stdout  # greedy: the same image gives the same answer
    tall = run(projector, os.path.join(IMAGES, "mtmdref-40x72.png"))
    assert tall.returncode == 0, tall.stderr
    assert "40x72 -> 96x128 pixels, 12 tokens" in tall.stderr
    assert tall.stdout != wide.stdout  # the answer depends on the image


@needs_fixtures
def test_refusals_name_the_reason(projector, tmp_path):
    png = os.path.join(IMAGES, "mtmdref-64x48.png")
    r = agentkv("run", "-m", QWEN35, "-p", PROMPT, "--image", png)
    assert r.returncode == 1 and "--image needs --mmproj" in r.stderr
    r = run(projector, png, model=QWEN3)
    assert r.returncode == 1 and "takes no image input" in r.stderr
    r = run(projector, png, png)
    assert r.returncode == 1 and "more --image files than <__media__> markers" in r.stderr
    r = run(projector, png, prompt=PROMPT + "<__media__>")
    assert r.returncode == 1 and "more <__media__> markers than --image files" in r.stderr
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(open(png, "rb").read()[:200])
    r = run(projector, str(truncated))
    assert r.returncode == 1 and "agentkv run:" in r.stderr
    gif = tmp_path / "image.gif"
    gif.write_bytes(b"GIF89a\x01\x00\x01\x00\x00\x00\x00")
    r = run(projector, str(gif))
    assert r.returncode == 1 and "GIF" in r.stderr


@needs_fixtures
def test_logits_report_with_an_image_follows_llama_cpp(projector, tmp_path):
    """`agentkv logits --mmproj P --image F`: the prompt laid out as mtmd lays it out (the text
    tokens of llama.cpp's chunks, the image's 12 rows between them) and the greedy continuation
    llama.cpp's mtmd produced (tests/data/vision/reference-avx2, both of its runs agree on it)."""
    import json
    ref = json.load(open(os.path.join(IMAGES, "reference-avx2", "qwen35-micro-vision.1img", "result.json")))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(ref["prompt"])
    png = os.path.join(IMAGES, "mtmdref-64x48.png")
    r = agentkv("logits", "-m", QWEN35, "--mmproj", projector, "--image", png, "--prompts", str(prompts),
                "--n-gen", "16", "--top", "5")
    assert r.returncode == 0, r.stderr
    (case,) = json.loads(r.stdout)["cases"]
    text, image = ref["chunks"][0]["tokens"] + ref["chunks"][2]["tokens"], case["prompt_tokens"][4:16]
    assert [t for t in case["prompt_tokens"] if t >= 0] == text
    assert len(case["prompt_tokens"]) == len(text) + 12 and all(t < 0 for t in image)
    assert len(case["prompt_top"]) == len(case["prompt_tokens"])  # every position, image rows too
    assert case["generated"] == ref["generated"]
    # markers and images must pair up
    r = agentkv("logits", "-m", QWEN35, "--mmproj", projector, "--image", png, "--image", png, "--prompts", str(prompts))
    assert r.returncode == 1 and "left over" in r.stderr
    r = agentkv("logits", "-m", QWEN35, "--image", png, "--prompts", str(prompts))
    assert r.returncode == 1 and "--mmproj and --image go together" in r.stderr
