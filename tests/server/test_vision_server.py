"""Images in chat requests (--mmproj, docs/vision.md) on the hybrid Qwen3.5 fixtures with their
projector presets: a screenshot agent whose every turn adds a screenshot and re-sends the earlier
ones reuses the cached prefix (images included) and encodes only the new image, with answers equal
to uncached runs; the Anthropic and Responses forms give the OpenAI form's answer; bad images and
image requests to a text-only server get a 400 and the server answers on unchanged."""

import base64
import os
import signal
import struct
import subprocess
import zlib

import pytest

from conftest import FIXTURES, MODEL, REPO, Server, _find_binary, metric, needs_fixtures, wait_for

IMAGES = os.path.join(REPO, "tests", "data", "vision")
SCREENS = [os.path.join(IMAGES, "mtmdref-64x48.png"), os.path.join(IMAGES, "mtmdref-40x72.png"),
           os.path.join(IMAGES, "preprocess", "rgb8-61x37.png"), os.path.join(IMAGES, "preprocess", "rgb8-100x70.png"),
           os.path.join(IMAGES, "preprocess", "rgba8-45x80.png"), os.path.join(IMAGES, "preprocess", "rgb8-64x32.png")]


def data_url(path):
    with open(path, "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode()


def image_part(path):
    return {"type": "image_url", "image_url": {"url": data_url(path)}}


def png_with_size(width, height):
    """A PNG whose header says width x height (one empty IDAT: refused before any pixel is decoded)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def make_projector(tmp_path_factory, preset):
    path = str(tmp_path_factory.mktemp("mmproj") / (preset + ".gguf"))
    r = subprocess.run([_find_binary(), "mkmodel", "--preset", preset, "-o", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return path


def language_model(tmp_path_factory, name):
    """The fixture model of that name, or (Qwen3-VL, no fixture) the preset mkmodel writes."""
    fixture = os.path.join(FIXTURES, "models", name + "-micro.gguf")
    if os.path.exists(fixture):
        return fixture
    return make_projector(tmp_path_factory, name + "-micro")  # mkmodel writes models and projectors alike


# qwen3vl: a dense model whose projector has deepstack mergers (three slices per image token).
@pytest.fixture(scope="module", params=["qwen35", "qwen35moe", "qwen3vl"])
def vision_server(request, tmp_path_factory):
    if not os.path.isdir(FIXTURES):
        pytest.skip("fixtures not found")
    name = request.param
    projector = make_projector(tmp_path_factory, name + "-micro-vision")
    s = Server(tmp_path_factory.mktemp("vision-" + name), "-np", "2", "-c", "4096", "--metrics", "--mmproj", projector,
               model=language_model(tmp_path_factory, name))
    yield s
    s.stop()


def chat(server, messages, path="/v1/chat/completions", **extra):
    body = {"messages": messages, "max_tokens": 6, "temperature": 0, **extra}
    status, out = server.post(path, body)
    assert status == 200, out
    return out


def answer(out):
    return out["choices"][0]["message"]["content"]


@needs_fixtures
def test_props_says_vision(vision_server):
    status, props = vision_server.get("/props")
    assert status == 200 and props["modalities"]["vision"] is True


@needs_fixtures
def test_screenshot_agent_reuses_every_earlier_turn(vision_server):
    """Six turns, each a new screenshot plus text, the client re-sending the whole conversation."""
    messages = [{"role": "system", "content": "You operate a computer. Answer with the next action."}]
    previous_prompt = 0
    prompt_sizes = []  # each turn's prompt, in tokens
    for turn, screen in enumerate(SCREENS):
        messages.append({"role": "user", "content": [{"type": "text", "text": "Step %d. The screen:" % turn},
                                                     image_part(screen)]})
        encoded_before = metric(vision_server, "images_encoded_total")
        out = chat(vision_server, messages)
        t = out["timings"]
        if turn > 0:
            # The whole previous prompt (its screenshots included) comes from the cache.
            assert t["cache_n"] >= previous_prompt, (turn, t)
        # Only the new screenshot is encoded; the earlier ones come from the encoder cache.
        assert metric(vision_server, "images_encoded_total") - encoded_before <= 1
        uncached = chat(vision_server, messages, cache_prompt=False)
        assert answer(uncached) == answer(out), turn
        previous_prompt = t["cache_n"] + t["prompt_n"]
        prompt_sizes.append(previous_prompt)
        if turn == 2:
            # A second session sending the first three turns (their screenshots again) reuses
            # them from the shared prefix index, up to the hybrid's last snapshot before turn 2.
            again = chat(vision_server, messages, session_id="another-agent")
            assert again["timings"]["cache_n"] >= prompt_sizes[1], (again["timings"], prompt_sizes)
        messages.append({"role": "assistant", "content": answer(out)})
    assert metric(vision_server, "image_cache_hits_total") >= len(SCREENS) - 1




@needs_fixtures
def test_the_image_decides_the_answer(vision_server):
    def ask(path):  # the answer and its tokens' log-probabilities (a random model may say the same)
        out = chat(vision_server, [{"role": "user", "content": [image_part(path), {"type": "text", "text": "What is it?"}]}],
                   max_tokens=12, logprobs=True)
        return answer(out), [round(t["logprob"], 4) for t in out["choices"][0]["logprobs"]["content"]]
    assert ask(SCREENS[0]) == ask(SCREENS[0])
    assert ask(SCREENS[0]) != ask(SCREENS[1])


@needs_fixtures
def test_anthropic_and_responses_forms_give_the_same_answer(vision_server):
    with open(SCREENS[2], "rb") as f:
        b64 = base64.b64encode(f.read()).decode()
    openai = answer(chat(vision_server, [{"role": "user", "content": [image_part(SCREENS[2]), {"type": "text", "text": "Describe."}]}]))
    status, msg = vision_server.post("/v1/messages", {
        "model": "m", "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
            {"type": "text", "text": "Describe."}]}]})
    assert status == 200, msg
    assert msg["content"][0]["text"] == openai
    status, resp = vision_server.post("/v1/responses", {
        "model": "m", "max_output_tokens": 6, "temperature": 0,
        "input": [{"role": "user", "content": [{"type": "input_image", "image_url": data_url(SCREENS[2])},
                                               {"type": "input_text", "text": "Describe."}]}]})
    assert status == 200, resp
    assert resp["output"][-1]["content"][0]["text"] == openai


@needs_fixtures
def test_native_prompt_with_multimodal_data(vision_server):
    """llama-server's prompt object: the text with a <__media__> marker per image, the images in
    multimodal_data (base64): the chat request's answer, token for token, its image cached."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "Look:"}, image_part(SCREENS[1]),
                                             {"type": "text", "text": "What now?"}]}]
    status, rendered = vision_server.post("/apply-template", {"messages": messages})
    assert status == 200 and rendered["prompt"].count("<__media__>") == 1, rendered
    with open(SCREENS[1], "rb") as f:
        b64 = base64.b64encode(f.read()).decode()
    body = {"n_predict": 6, "temperature": 0, "return_tokens": True,
            "prompt": {"prompt_string": rendered["prompt"], "multimodal_data": [b64]}}
    status, native = vision_server.post("/completion", body)
    assert status == 200, native
    assert native["content"] == answer(chat(vision_server, messages))
    status, again = vision_server.post("/completion", body)
    assert again["tokens"] == native["tokens"] and again["timings"]["cache_n"] > 0
    # The OpenAI completions route reads it too, and a list of prompts holds such objects.
    status, oai = vision_server.post("/v1/completions", {"max_tokens": 6, "temperature": 0, "prompt": body["prompt"]})
    assert status == 200 and oai["choices"][0]["text"] == native["content"], oai
    status, both = vision_server.post("/completion", dict(body, prompt=[body["prompt"], "plain text"]))
    assert status == 200 and both[0]["content"] == native["content"], both
    # Markers and images must agree; data that is no base64 image is a 400; other routes refuse it.
    for prompt, words in [({"prompt_string": "no marker", "multimodal_data": [b64]}, "image places"),
                          ({"prompt_string": "<__media__>", "multimodal_data": ["@@@"]}, "base64"),
                          ({"prompt_string": "<__media__>", "multimodal_data": "x"}, "array"),
                          ({"prompt_string": "<__media__>", "multimodal_data": [b64], "x": 1}, "prompt_string")]:
        status, out = vision_server.post("/completion", dict(body, prompt=prompt))
        assert status == 400 and words in out["error"]["message"], (prompt, out)
    status, out = vision_server.post("/tokenize", {"content": body["prompt"]})
    assert status == 400 and "multimodal_data" in out["error"]["message"], out


@needs_fixtures
def test_media_path_serves_local_files_and_nothing_beyond(tmp_path_factory, tmp_path):
    """--media-path (llama-server's): file://RELATIVE names a file under the folder; absolute
    paths, '..' and links leading outside are a 400, and without the flag file:// is refused."""
    import shutil
    media = tmp_path / "media"
    (media / "shots").mkdir(parents=True)
    shutil.copy(SCREENS[1], media / "shots" / "screen.png")
    secret = tmp_path / "secret.png"
    shutil.copy(SCREENS[0], secret)
    os.symlink(secret, media / "escape.png")
    projector = make_projector(tmp_path_factory, "qwen35-micro-vision")
    s = Server(tmp_path / "srv", "-np", "1", "-c", "2048", "--mmproj", projector, "--media-path", str(media),
               model=os.path.join(FIXTURES, "models", "qwen35-micro.gguf"))
    try:
        ask = lambda url: s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is it?"}]}],
            "max_tokens": 6, "temperature": 0})
        status, local = ask("file://shots/screen.png")
        assert status == 200, local
        assert answer(local) == answer(ask(data_url(SCREENS[1]))[1])
        status, native = s.post("/completion", {"n_predict": 2, "prompt": {
            "prompt_string": "<__media__>", "multimodal_data": ["file://shots/screen.png"]}})
        assert status == 200, native
        for url in ["file:///etc/passwd", "file://../secret.png", "file://shots/../../secret.png",
                    "file://escape.png", "file://missing.png", "file://shots"]:
            status, out = ask(url)
            assert status == 400 and "--media-path" in out["error"]["message"], (url, out)
            assert str(tmp_path) not in out["error"]["message"]  # no host paths in answers
    finally:
        s.stop()
    plain = Server(tmp_path / "plain", "-np", "1", "-c", "1024", "--mmproj", projector,
                   model=os.path.join(FIXTURES, "models", "qwen35-micro.gguf"))
    try:
        status, out = plain.post("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "file://shots/screen.png"}}]}], "max_tokens": 2})
        assert status == 400 and "--media-path" in out["error"]["message"], out
    finally:
        plain.stop()
    r = subprocess.run([_find_binary(), "serve", "-m", MODEL, "--port", "0", "--media-path", str(tmp_path / "none")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "not a directory" in r.stderr + r.stdout


@needs_fixtures
def test_bad_images_get_a_400_and_lose_nothing(vision_server):
    canary = [{"role": "user", "content": "Say something."}]
    before = answer(chat(vision_server, canary))

    def refused(part, words):
        status, out = vision_server.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Look:"}, part]}], "max_tokens": 4})
        assert status == 400, out
        assert words in out["error"]["message"], out["error"]["message"]

    as_part = lambda raw, mime="image/png": {"type": "image_url", "image_url": {
        "url": "data:%s;base64,%s" % (mime, base64.b64encode(raw).decode())}}
    png = open(SCREENS[0], "rb").read()
    refused({"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}, "not fetched")
    refused({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}, "base64")
    refused(as_part(b""), "image 0")
    refused(as_part(png[:len(png) // 2]), "image 0")
    refused(as_part(b"GIF89a\x01\x00\x01\x00\x00\x00\x00", "image/gif"), "GIF")
    refused(as_part(b"not an image at all"), "image 0")
    refused(as_part(png_with_size(30000, 30000)), "30000")
    refused(as_part(png, "text/plain"), "not an image")
    assert answer(chat(vision_server, canary)) == before
    status, _ = vision_server.get("/health")
    assert status == 200


@needs_fixtures
def test_a_text_only_server_refuses_images(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", "1024", model=os.path.join(FIXTURES, "models", "qwen35-micro.gguf"))
    try:
        status, out = s.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": [image_part(SCREENS[0])]}], "max_tokens": 2})
        assert status == 400 and "--mmproj" in out["error"]["message"], out
        status, out = s.post("/completion", {"prompt": {"prompt_string": "<__media__>", "multimodal_data": ["AAAA"]},
                                             "n_predict": 2})
        assert status == 400 and "--mmproj" in out["error"]["message"], out
        status, props = s.get("/props")
        assert props["modalities"]["vision"] is False
    finally:
        s.stop()


@needs_fixtures
def test_a_projector_that_does_not_fit_the_model_stops_the_start(tmp_path_factory, tmp_path):
    projector = make_projector(tmp_path_factory, "qwen35-micro-vision")
    r = subprocess.run([_find_binary(), "serve", "-m", MODEL, "--port", "0", "--mmproj", projector],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "takes no image input" in r.stderr + r.stdout
    # A Qwen3.5 tower (no deepstack) for a Qwen3-VL model (two deepstack layers): widths differ.
    qwen3vl = language_model(tmp_path_factory, "qwen3vl")
    r = subprocess.run([_find_binary(), "serve", "-m", qwen3vl, "--port", "0", "--mmproj", projector],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "deepstack" in r.stderr + r.stdout and "do not belong together" in r.stderr + r.stdout


@needs_fixtures
@pytest.mark.parametrize("name", ["qwen35", "qwen3vl"])
def test_images_survive_kill9_and_slot_restore(tmp_path_factory, tmp_path, name):
    """Turns with screenshots, then kill -9 and a restart on the same --cache-dir: the next turn
    evaluates only its new tokens; a slot saved with images and restored on a fresh server (no
    cache) continues without evaluating them again."""
    projector = make_projector(tmp_path_factory, name + "-micro-vision")
    model = language_model(tmp_path_factory, name)
    saves = tmp_path / "saves"
    saves.mkdir()
    args = ("-np", "1", "-c", "4096", "--metrics", "--mmproj", projector, "--cache-dir", str(tmp_path / "cache"),
            "--slot-save-path", str(saves))
    messages = [{"role": "system", "content": "You operate a computer."}]

    def turn(server, k):
        messages.append({"role": "user", "content": [{"type": "text", "text": "Step %d:" % k}, image_part(SCREENS[k])]})
        out = chat(server, messages)
        messages.append({"role": "assistant", "content": answer(out)})
        return out["timings"]

    first = Server(tmp_path / "first", *args, model=model)
    try:
        for k in range(3):
            t = turn(first, k)
        status, saved = first.post("/slots/0?action=save", {"filename": "agent.bin"})
        assert status == 200 and saved["n_saved"] > 0, saved
        first.wait_all_idle()
        assert wait_for(lambda: metric(first, "disk_tier_writes_pending") == 0)
    finally:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    held = t["cache_n"] + t["prompt_n"]

    restarted = Server(tmp_path / "restarted", *args, model=model)
    try:
        t = turn(restarted, 3)
        assert t["cache_n"] >= held, t  # the pages (and the hybrid snapshot) came back from the disk
    finally:
        restarted.stop()

    del messages[-2:]  # back to the saved conversation
    fresh = Server(tmp_path / "fresh", "-np", "1", "-c", "4096", "--mmproj", projector, "--slot-save-path", str(saves),
                   model=model)
    try:
        status, restored = fresh.post("/slots/0?action=restore", {"filename": "agent.bin"})
        assert status == 200 and restored["n_restored"] == saved["n_saved"], restored
        t = turn(fresh, 3)
        assert t["cache_n"] >= saved["n_saved"] - 1, t
    finally:
        fresh.stop()


@needs_fixtures
def test_an_answer_after_an_image_keeps_its_generated_tokens(vision_server):
    """A grammar makes the model spell its answer in pieces BPE would merge; the next turn re-renders
    the answer as text after the first turn's screenshot, and the prompt keeps the answer's
    generated tokens (aligned after the image), so only the new turn is evaluated."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "Click what?"}, image_part(SCREENS[4])]}]
    out = chat(vision_server, messages, max_tokens=12, grammar='root ::= "the " "bu" "tton"', return_tokens=True)
    first = out["timings"]
    assert answer(out) == "the button"
    messages += [{"role": "assistant", "content": answer(out)},
                 {"role": "user", "content": [{"type": "text", "text": "Now?"}, image_part(SCREENS[5])]}]
    t = chat(vision_server, messages)["timings"]
    # The whole first prompt and every generated token but the last (sampled, never evaluated).
    assert t["cache_n"] >= first["cache_n"] + first["prompt_n"] + first["predicted_n"] - 1, (first, t)


def screenshot_turns(n):
    """A GUI agent's first n turns: each a new screenshot and a line of text."""
    messages = [{"role": "system", "content": "You operate a computer. Answer with the next action."}]
    for turn in range(n):
        messages.append({"role": "user", "content": [{"type": "text", "text": "Step %d. The screen:" % turn},
                                                     image_part(SCREENS[turn])]})
        if turn + 1 < n:
            messages.append({"role": "assistant", "content": "click %d" % turn})
    return messages


@needs_fixtures
@pytest.mark.parametrize("name", ["qwen35", "qwen35moe", "qwen3vl"])
def test_a_screenshot_conversation_moves_through_redis(tmp_path_factory, tmp_path, name):
    """Instance A serves two screenshot turns and stops; instance B, sharing its Redis tier and the
    same projector, serves the third from A's pages (image rows named by the images' content) and
    (hybrids) snapshot: only the new turn is evaluated, only the new screenshot encoded, the answer as an
    uncached run's."""
    from test_redis_tier import Redis, free_port
    projector = make_projector(tmp_path_factory, name + "-micro-vision")
    model = language_model(tmp_path_factory, name)
    redis = Redis(tmp_path, free_port())
    url = "redis://127.0.0.1:%d" % redis.port
    a = Server(tmp_path / "a", "-np", "1", "--cache-redis", url, "--metrics", "--batch-invariant", "--mmproj", projector,
               model=model)
    b = Server(tmp_path / "b", "-np", "1", "--cache-redis", url, "--metrics", "--batch-invariant", "--mmproj", projector,
               model=model)
    try:
        two = screenshot_turns(2)
        out = chat(a, two)
        held = out["timings"]["cache_n"] + out["timings"]["prompt_n"]  # turn 2's prompt, images included
        hybrid = name != "qwen3vl"  # a dense model's pages need no recurrent snapshot
        assert (metric(a, "tier_snapshots_sent_total") >= 1) == hybrid, a.log()
        redis.settle(held // 16)
        a.stop()
        three = two + [{"role": "assistant", "content": answer(out)}] + screenshot_turns(3)[-1:]
        got = chat(b, three)
        assert got["timings"]["cache_n"] >= held, (got["timings"], held, b.log())
        assert (metric(b, "tier_snapshots_fetched_total") >= 1) == hybrid
        assert metric(b, "images_encoded_total") == 1  # the new screenshot; the two earlier came as pages
        assert answer(got) == answer(chat(b, three, cache_prompt=False))
    finally:
        a.stop()
        b.stop()
        redis.stop()


@needs_fixtures
def test_a_screenshot_prompt_prefilled_elsewhere_is_adopted(tmp_path_factory, tmp_path):
    """Prefill / decode split with images: one instance evaluates a screenshot prompt (/v1/prefill),
    another adopts the state and answers the same conversation evaluating nothing of it, as an
    uncached run."""
    projector = make_projector(tmp_path_factory, "qwen35-micro-vision")
    model = os.path.join(FIXTURES, "models", "qwen35-micro.gguf")
    messages = screenshot_turns(2)
    prefiller = Server(tmp_path / "p", "-np", "1", "--batch-invariant", "--mmproj", projector, model=model)
    try:
        status, state = prefiller.post("/v1/prefill", {"messages": messages})
        assert status == 200, state
    finally:
        prefiller.stop()
    decoder = Server(tmp_path / "d", "-np", "1", "--metrics", "--batch-invariant", "--mmproj", projector, model=model)
    try:
        status, body = decoder.post("/slots/0?action=adopt", {"state": state["state"]})
        assert status == 200 and body["n_restored"] == state["n_tokens"], body
        got = chat(decoder, messages, id_slot=0)
        assert got["timings"]["prompt_n"] <= 1, got["timings"]  # at most the last token, for its logits
        assert metric(decoder, "images_encoded_total") == 0  # the images' rows came in the state
        assert answer(got) == answer(chat(decoder, messages, cache_prompt=False))
    finally:
        decoder.stop()


@needs_fixtures
def test_cache_lookup_counts_image_rows_without_encoding(vision_server):
    """A router's /v1/cache/lookup of a screenshot conversation: the image rows the server holds
    count, and nothing is projected to find out (the images are decoded and hashed only)."""
    messages = screenshot_turns(2)
    messages[-1]["content"][0]["text"] = "Lookup step:"  # a prompt of its own
    before = chat(vision_server, messages)
    held = before["timings"]["cache_n"] + before["timings"]["prompt_n"]
    encoded = metric(vision_server, "images_encoded_total")
    status, out = vision_server.post("/v1/cache/lookup", {"messages": messages})
    assert status == 200, out
    assert out["n_prompt_tokens"] == held
    assert out["n_cached_tokens"] >= out["page_tokens"] * ((held - 1) // out["page_tokens"]) - out["page_tokens"], out
    other = screenshot_turns(2)
    other[-1]["content"][1] = image_part(SCREENS[5])  # a screenshot the server never saw
    status, out = vision_server.post("/v1/cache/lookup", {"messages": other})
    assert status == 200 and out["n_cached_tokens"] < out["n_prompt_tokens"], out
    assert metric(vision_server, "images_encoded_total") == encoded


@needs_fixtures
def test_screenshot_pages_come_back_from_the_warm_tier(tmp_path_factory, tmp_path):
    """A screenshot conversation whose pages the pool gave up to another prompt comes back from the
    warm tier: its next turn evaluates only the new tokens and the screenshot is not projected again
    (no encoder cache here to hide it), the answer as an uncached run's."""
    projector = make_projector(tmp_path_factory, "qwen35-micro-vision")
    model = os.path.join(FIXTURES, "models", "qwen35-micro.gguf")
    s = Server(tmp_path / "warm", "-np", "1", "-c", "512", "--metrics", "--cache-warm", "64", "--image-cache-mib", "0",
               "--mmproj", projector, model=model)
    try:
        messages = screenshot_turns(1)
        first = chat(s, messages)
        held = first["timings"]["prompt_n"]
        assert wait_for(lambda: metric(s, "warm_tier_stores_pending") == 0)
        status, _ = s.post("/completion", {"prompt": list(range(3000, 3480)), "n_predict": 4})  # takes the pool
        assert status == 200
        encoded = metric(s, "images_encoded_total")
        messages += [{"role": "assistant", "content": answer(first)}, {"role": "user", "content": "And now?"}]
        second = chat(s, messages)
        assert second["timings"]["cache_n"] >= held - 1, (second["timings"], held)
        assert metric(s, "warm_tier_hits_total") > 0
        assert metric(s, "images_encoded_total") == encoded
        assert answer(second) == answer(chat(s, messages, cache_prompt=False))
    finally:
        s.stop()
