"""Context checkpoints on a hybrid model (qwen35moe: DeltaNet recurrent layers + attention). A
checkpoint is taken at the end of every turn's prompt and of its generation, so an agent's next
turn evaluates only its new tokens, and a turn that rewrites the previous answer rolls back to the
end of the previous prompt instead of starting over."""

import os
import re

import pytest

from conftest import FIXTURES, Server

GREEDY = {"temperature": 0, "repeat_penalty": 2.0, "repeat_last_n": 64, "return_tokens": True}


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("moe"), "-np", "2", "-c", "2048", "--metrics",
               model=os.path.join(FIXTURES, "models", "qwen35moe-micro.gguf"))
    yield s
    s.stop()


def complete(server, prompt, n_predict, **extra):
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": n_predict, **GREEDY, **extra})
    assert status == 200, body
    return body


def tokens(server, text):
    _, body = server.post("/tokenize", {"content": text})
    return body["tokens"]


def metric(server, name):
    _, text = server.get("/metrics")
    return float(re.search(r"^llamacpp:%s (\S+)$" % name, text, re.M).group(1))


def test_agent_turn_evaluates_only_the_new_tokens(moe):
    turn1 = tokens(moe, "System: you are a coding agent. User: list the files in the repository.")
    new = tokens(moe, " Tool: README.md src tests. Continue.")
    first = complete(moe, turn1, 6, session_id="agent")
    turn2 = turn1 + first["tokens"] + new
    second = complete(moe, turn2, 6, session_id="agent")
    # The last answer token was never evaluated (it was sampled last); everything before is reused.
    assert second["timings"]["cache_n"] == len(turn1) + 5
    assert second["timings"]["prompt_n"] == 1 + len(new)
    assert second["tokens"] == complete(moe, turn2, 6, cache_prompt=False)["tokens"]


def test_rewritten_answer_rolls_back_to_the_checkpoint(moe):
    turn1 = tokens(moe, "User: summarize the build log in one line, then stop.")
    edited = tokens(moe, " Assistant (edited): build OK. User: now the tests.")
    complete(moe, turn1, 6, session_id="rollback")
    restored_before = metric(moe, "checkpoints_restored_total")
    second = complete(moe, turn1 + edited, 6, session_id="rollback")
    assert second["timings"]["cache_n"] == len(turn1)  # the checkpoint at the end of turn 1's prompt
    assert second["timings"]["prompt_n"] == len(edited)
    assert metric(moe, "checkpoints_restored_total") == restored_before + 1
    assert re.search(r"slot %d: rolled back to the checkpoint after token %d" % (second["id_slot"], len(turn1)),
                     moe.log())
    assert second["tokens"] == complete(moe, turn1 + edited, 6, cache_prompt=False)["tokens"]


def test_repeated_prompt_restores_the_checkpoint_and_its_logits(moe):
    prompt = tokens(moe, "User: what is a recurrent state?")
    first = complete(moe, prompt, 5, session_id="repeat")
    again = complete(moe, prompt, 5, session_id="repeat")
    assert again["timings"]["cache_n"] == len(prompt) and again["timings"]["prompt_n"] == 0
    assert again["tokens"] == first["tokens"]


def test_checkpoint_metrics(moe):
    complete(moe, tokens(moe, "User: hello there."), 3)
    assert metric(moe, "checkpoints_taken_total") >= 2
    assert metric(moe, "checkpoint_bytes") > 0 and metric(moe, "checkpoints") >= 1
    assert 0 < metric(moe, "prompt_cache_hit_rate") < 1
