"""Hand-off without re-prefill: slot save / restore / erase / adopt (--slot-save-path), POST
/v1/prefill and `agentkv prefill`. A restored state carries the logits after its last token, so the
same prompt evaluates nothing; an extension evaluates only the extension; a divergence gives the
same text as a fresh run."""

import base64
import os
import re
import subprocess

import pytest

from conftest import FIXTURES, HYBRID_MODELS, MEMORY_MODELS, SNAPSHOT_MODELS, MODEL, Server, _find_binary, model_file, needs_fixtures

GREEDY = {"temperature": 0, "repeat_penalty": 2.0, "repeat_last_n": 64, "return_tokens": True}
HYBRID = os.path.join(FIXTURES, "models", "qwen35moe-micro.gguf")


def complete(server, prompt, n_predict, **extra):
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": n_predict, **GREEDY, **extra})
    assert status == 200, body
    return body


def fresh(server, prompt, n_predict):
    # Under a salt of its own: the reference runs' pages are not shared with the runs under test.
    body = complete(server, prompt, n_predict, cache_prompt=False, cache_salt="reference-run")
    assert body["timings"]["cache_n"] == 0
    return body["tokens"]


@pytest.fixture(scope="module")
def save_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("slot-states"))


def check_three_followups(server, slot, restore, prompt, extra, expected):
    """restore() puts the saved state back into `slot`; `expected` maps prompts to fresh tokens."""
    restore()
    same = complete(server, prompt, 8, id_slot=slot)
    assert same["timings"]["prompt_n"] == 0 and same["timings"]["cache_n"] == len(prompt)
    assert same["tokens"] == expected["same"]

    restore()
    longer = complete(server, prompt + extra, 8, id_slot=slot)
    # At least the restored state is reused; pages an earlier run of the same prompt left in the
    # prefix index (another slot's) may give more.
    assert longer["timings"]["cache_n"] >= len(prompt)
    assert longer["timings"]["cache_n"] + longer["timings"]["prompt_n"] == len(prompt) + len(extra)
    assert longer["tokens"] == expected["longer"]

    restore()
    cut = len(prompt) // 2
    diverged = complete(server, prompt[:cut] + extra, 8, id_slot=slot)
    assert diverged["timings"]["cache_n"] + diverged["timings"]["prompt_n"] == cut + len(extra)
    assert diverged["tokens"] == expected["diverged"]
    return diverged


def expected_tokens(server, prompt, extra):
    cut = len(prompt) // 2
    return {"same": fresh(server, prompt, 8), "longer": fresh(server, prompt + extra, 8),
            "diverged": fresh(server, prompt[:cut] + extra, 8)}


# The attention-only models, sliding-window ones included (the hybrid's states have their own tests below).
PLAIN_MODELS = [k for k in MEMORY_MODELS if k not in HYBRID_MODELS]


@pytest.mark.parametrize("kind", PLAIN_MODELS)
def test_save_restart_restore(tmp_path, save_dir, reference, kind):
    prompt, extra = reference[5]["prompt_tokens"], reference[3]["prompt_tokens"]
    model = model_file(kind)
    first = Server(tmp_path / "first", "-np", "2", "--slot-save-path", save_dir, model=model)
    try:
        warm = complete(first, prompt, 0, id_slot=0)
        assert warm["tokens_cached"] == len(prompt)
        status, saved = first.post("/slots/0?action=save", {"filename": "agent.state"})
        assert status == 200, saved
        assert saved["id_slot"] == 0 and saved["filename"] == "agent.state" and saved["n_saved"] == len(prompt)
        assert saved["n_written"] == os.path.getsize(os.path.join(save_dir, "agent.state"))
        assert saved["timings"]["save_ms"] >= 0
    finally:
        first.stop()

    second = Server(tmp_path / "second", "-np", "2", "--slot-save-path", save_dir, model=model)
    try:
        expected = expected_tokens(second, prompt, extra)

        def restore():
            status, body = second.post("/slots/1?action=restore", {"filename": "agent.state"})
            assert status == 200, body
            assert body["id_slot"] == 1 and body["n_restored"] == len(prompt)
            assert body["n_read"] == os.path.getsize(os.path.join(save_dir, "agent.state"))
            assert "restore_ms" in body["timings"]

        diverged = check_three_followups(second, 1, restore, prompt, extra, expected)
        # Attention drops the suffix; a sliding-window memory resumes only at a snapshot, and the
        # state's only one is at its end (docs/memory-semantics.md §10).
        assert diverged["timings"]["cache_n"] == (0 if kind in SNAPSHOT_MODELS else len(prompt) // 2)

        status, erased = second.post("/slots/1?action=erase", {})
        assert status == 200 and erased["id_slot"] == 1 and erased["n_erased"] > 0
        _, slots = second.get("/slots")
        assert slots[1]["n_tokens_cached"] == 0
    finally:
        second.stop()


@pytest.mark.parametrize("kind", PLAIN_MODELS)
def test_adopt_a_state_prefilled_by_another_process(tmp_path, save_dir, reference, kind):
    prompt, extra = reference[5]["prompt_tokens"], reference[3]["prompt_tokens"]
    model = model_file(kind)
    prefiller = Server(tmp_path / "prefill", "-np", "1", "--slot-save-path", save_dir, model=model)
    try:
        status, inline = prefiller.post("/v1/prefill", {"prompt": prompt})
        assert status == 200, inline
        assert inline["n_prompt_tokens"] == len(prompt) and inline["n_tokens"] == len(prompt)
        assert inline["timings"]["prompt_n"] == len(prompt)
        blob = base64.b64decode(inline["state"])
        assert len(blob) == inline["n_bytes"]
        status, to_file = prefiller.post("/v1/prefill", {"prompt": prompt, "filename": "prefilled.state"})
        assert status == 200 and to_file["filename"] == "prefilled.state" and "state" not in to_file
    finally:
        prefiller.stop()

    decoder = Server(tmp_path / "decode", "-np", "2", "--slot-save-path", save_dir, model=model)
    try:
        expected = expected_tokens(decoder, prompt, extra)

        def adopt_inline():
            status, body = decoder.post("/slots/0?action=adopt", {"state": inline["state"]})
            assert status == 200 and body["n_restored"] == len(prompt) and body["n_read"] == len(blob), body

        def adopt_file():
            status, body = decoder.post("/slots/1?action=adopt", {"filename": "prefilled.state"})
            assert status == 200 and body["n_restored"] == len(prompt), body

        check_three_followups(decoder, 0, adopt_inline, prompt, extra, expected)
        check_three_followups(decoder, 1, adopt_file, prompt, extra, expected)
    finally:
        decoder.stop()


@needs_fixtures
def test_cli_prefill_is_adopted(tmp_path, save_dir):
    text = "You are an agent. Read the tool output and answer briefly."
    path = os.path.join(save_dir, "cli.state")
    run = subprocess.run([_find_binary(), "prefill", "-m", MODEL, "-p", text, "-o", path],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    server = Server(tmp_path / "cli", "-np", "1", "--slot-save-path", save_dir)
    try:
        _, tok = server.post("/tokenize", {"content": text, "add_special": True})
        expected = fresh(server, tok["tokens"], 6)
        status, body = server.post("/slots/0?action=adopt", {"filename": "cli.state"})
        assert status == 200 and body["n_restored"] == len(tok["tokens"]), body
        same = complete(server, text, 6)
        assert same["timings"]["prompt_n"] == 0 and same["tokens"] == expected
    finally:
        server.stop()


@pytest.mark.parametrize("kind", HYBRID_MODELS)
def test_hybrid_handoff_through_prefill(tmp_path, kind):
    prefiller = Server(tmp_path / "hp", "-np", "1", model=model_file(kind))
    try:
        _, tok = prefiller.post("/tokenize", {"content": "Agents call tools, read the results and continue the plan."})
        prompt = tok["tokens"]
        extra = [16, 17, 18, 19, 20]
        status, state = prefiller.post("/v1/prefill", {"prompt": prompt})
        assert status == 200, state
    finally:
        prefiller.stop()
    decoder = Server(tmp_path / "hd", "-np", "1", model=model_file(kind))
    try:
        expected = expected_tokens(decoder, prompt, extra)

        def adopt():
            status, body = decoder.post("/slots/0?action=adopt", {"state": state["state"]})
            assert status == 200 and body["n_restored"] == len(prompt), body

        diverged = check_three_followups(decoder, 0, adopt, prompt, extra, expected)
        # The recurrent state cannot drop a suffix and the state's only checkpoint is at its end.
        assert diverged["timings"]["cache_n"] == 0
        assert re.search(r"state restored from state in the request \(%d tokens, with logits, 1 checkpoints, 0 tokens from cached pages\)"
                         % len(prompt), decoder.log())
    finally:
        decoder.stop()


@pytest.mark.parametrize("kind", SNAPSHOT_MODELS)
def test_hybrid_state_carries_its_checkpoints(tmp_path, save_dir, kind):
    saver = Server(tmp_path / "hs", "-np", "1", "--slot-save-path", save_dir, model=model_file(kind))
    try:
        _, tok = saver.post("/tokenize", {"content": "User: plan the refactoring of the parser module."})
        prompt = tok["tokens"]
        answer = complete(saver, prompt, 6)
        status, saved = saver.post("/slots/0?action=save", {"filename": "hybrid.state"})
        assert status == 200 and saved["n_saved"] == len(prompt) + 5, saved
    finally:
        saver.stop()
    loader = Server(tmp_path / "hl", "-np", "1", "--slot-save-path", save_dir, model=model_file(kind))
    try:
        rewritten = prompt + [16, 17, 18, 19]
        expected = fresh(loader, rewritten, 6)
        status, body = loader.post("/slots/0?action=restore", {"filename": "hybrid.state"})
        assert status == 200 and body["n_restored"] == len(prompt) + 5, body
        assert "with logits, 2 checkpoints" in loader.log()  # the ends of the prompt and of the answer
        # The answer is replaced: roll back to the checkpoint at the end of the prompt.
        again = complete(loader, rewritten, 6)
        assert again["timings"]["cache_n"] == len(prompt) and again["timings"]["prompt_n"] == 4
        assert again["tokens"] == expected
        # Continuing after the whole saved answer evaluates only the new tokens.
        loader.post("/slots/0?action=restore", {"filename": "hybrid.state"})
        follow = prompt + answer["tokens"] + [16, 17]
        cont = complete(loader, follow, 6)
        assert cont["timings"]["cache_n"] == len(prompt) + 5 and cont["timings"]["prompt_n"] == 3
        assert cont["tokens"] == fresh(loader, follow, 6)
    finally:
        loader.stop()


def assert_error(response, status, message_part):
    code, body = response
    assert code == status, body
    assert message_part in body["error"]["message"], body


def test_slot_action_errors(tmp_path, save_dir, server):
    assert_error(server.post("/slots/0?action=save", {"filename": "x"}), 501, "--slot-save-path")
    s = Server(tmp_path / "errors", "-np", "1", "--slot-save-path", save_dir)
    try:
        for bad in ["../escape.state", "a/b", "", ".", "..", "dir\\\\file"]:
            for action in ["save", "restore", "adopt"]:
                assert_error(s.post("/slots/0?action=" + action, {"filename": bad}), 400, "invalid filename")
        assert_error(s.post("/v1/prefill", {"prompt": "hi", "filename": "../x"}), 400, "invalid filename")
        assert_error(s.post("/slots/0?action=restore", {"filename": "missing.state"}), 400, "not found")
        assert_error(s.post("/slots/0?action=fly", {}), 400, "Invalid action")
        assert_error(s.post("/slots/7?action=erase", {}), 400, "does not exist")
        assert_error(s.post("/slots/x?action=erase", {}), 400, "invalid slot id")
        assert_error(s.post("/slots/0?action=adopt", {"state": "@@@"}), 400, "base64")
        assert_error(s.post("/slots/0?action=adopt", {"state": base64.b64encode(b"not a state").decode()}), 400,
                     "state in the request")
    finally:
        s.stop()


def test_state_from_another_model_is_refused(tmp_path, reference):
    dense = Server(tmp_path / "dense", "-np", "1")
    try:
        _, state = dense.post("/v1/prefill", {"prompt": reference[0]["prompt_tokens"]})
    finally:
        dense.stop()
    hybrid = Server(tmp_path / "other", "-np", "1", model=HYBRID)
    try:
        prompt = [16, 17, 18, 19, 20, 21]
        complete(hybrid, prompt, 0)
        assert_error(hybrid.post("/slots/0?action=adopt", {"state": state["state"]}), 400, "another model")
        _, slots = hybrid.get("/slots")
        assert slots[0]["n_tokens_cached"] == len(prompt)  # unchanged
        again = complete(hybrid, prompt + [22], 2)
        assert again["timings"]["cache_n"] == len(prompt)
    finally:
        hybrid.stop()


def test_prefill_messages_then_chat_evaluates_nothing(tmp_path):
    s = Server(tmp_path / "chat", "-np", "1")
    try:
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime."}]
        status, pre = s.post("/v1/prefill", {"messages": messages})
        assert status == 200 and pre["timings"]["prompt_n"] == pre["n_prompt_tokens"], pre
        status, chat = s.post("/v1/chat/completions", {"messages": messages, "max_tokens": 3, "temperature": 0})
        assert status == 200, chat
        assert chat["usage"]["prompt_tokens"] == pre["n_prompt_tokens"]
        assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] == pre["n_prompt_tokens"]
        assert chat["timings"]["prompt_n"] == 0
    finally:
        s.stop()


def metric(server, name):
    _, text = server.get("/metrics")
    return float(re.search(r"^llamacpp:%s (\S+)$" % name, text, re.M).group(1))


def test_restoring_a_state_whose_pages_are_cached_shares_them(tmp_path, save_dir, reference):
    """State files hold a sequence as its page chain (format version 2): restored next to its own
    cached pages, a state attaches them instead of copying its rows, so the memory holds the
    prefix once; restored where nothing is cached, it brings all its rows."""
    prompt, extra = reference[5]["prompt_tokens"], reference[3]["prompt_tokens"]
    server = Server(tmp_path / "share", "-np", "2", "--metrics", "--slot-save-path", save_dir)
    try:
        first = complete(server, prompt, 4, id_slot=0)
        status, saved = server.post("/slots/0?action=save", {"filename": "shared.state"})
        assert status == 200 and saved["n_saved"] == len(prompt) + 3, saved
        one = metric(server, "memory_bytes")
        status, body = server.post("/slots/1?action=restore", {"filename": "shared.state"})
        assert status == 200 and body["n_restored"] == len(prompt) + 3, body
        assert "(%d tokens, with logits, 1 checkpoints" % (len(prompt) + 3) not in server.log()  # dense: none
        assert re.search(r"slot 1: state restored from .*, %d tokens from cached pages\)" % (len(prompt) + 3),
                         server.log()), server.log()
        follow = prompt + first["tokens"] + extra
        cont = complete(server, follow, 4, id_slot=1)
        assert cont["timings"]["cache_n"] == len(prompt) + 3
        assert metric(server, "memory_bytes") <= 1.3 * one  # the restored prefix is not stored twice
        assert cont["tokens"] == fresh(server, follow, 4)
    finally:
        server.stop()
    info = subprocess.run([_find_binary(), "state", "info", os.path.join(save_dir, "shared.state")],
                          capture_output=True, text=True, timeout=60)
    assert info.returncode == 0, info.stderr
    assert "version 5" in info.stdout and "page chain: %d pages of 16 tokens" % ((len(prompt) + 3) // 16) in info.stdout, \
        info.stdout
    other = Server(tmp_path / "alone", "-np", "1", "--slot-save-path", save_dir)
    try:
        status, body = other.post("/slots/0?action=restore", {"filename": "shared.state"})
        assert status == 200 and body["n_restored"] == len(prompt) + 3, body
        assert "0 tokens from cached pages" in other.log()
        cont = complete(other, prompt + first["tokens"] + extra, 4)
        assert cont["timings"]["cache_n"] == len(prompt) + 3
    finally:
        other.stop()
