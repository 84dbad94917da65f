"""A hybrid model (Gated DeltaNet + attention, qwen35): its recurrent state cannot drop a suffix, so
without checkpoints (a later task) a prompt that diverges inside the cache is evaluated from the
start, while a prompt that extends the cache still reuses all of it."""

import os
import threading

import pytest

from conftest import FIXTURES, Server

GREEDY = {"temperature": 0, "return_tokens": True}


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("hybrid"), "-np", "2", "-c", "1024",
               model=os.path.join(FIXTURES, "models", "qwen35-micro.gguf"))
    yield s
    s.stop()


def complete(server, prompt, n_predict, **extra):
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": n_predict, **GREEDY, **extra})
    assert status == 200, body
    return body


def test_extension_reuses_the_state_and_divergence_restarts(hybrid):
    _, tok = hybrid.post("/tokenize", {"content": "Agents call tools, read the results and continue."})
    prompt = tok["tokens"]
    first = complete(hybrid, prompt, 4, session_id="h")
    follow = prompt + first["tokens"] + prompt
    second = complete(hybrid, follow, 4, session_id="h")
    assert second["timings"]["cache_n"] == len(prompt) + 3
    assert second["timings"]["prompt_n"] == len(follow) - (len(prompt) + 3)
    assert complete(hybrid, follow, 4, cache_prompt=False)["tokens"] == second["tokens"]

    diverged = prompt[:-1] + [prompt[0]]
    third = complete(hybrid, diverged, 4, session_id="h")
    assert third["timings"]["cache_n"] == 0
    assert third["timings"]["prompt_n"] == len(diverged)
    assert "the recurrent state cannot drop a suffix" in hybrid.log()


def test_batched_slots_match_single_runs(hybrid):
    prompts = [[785, 3974, 13876], [750, 75698, 1445, 982, 262], [16, 17, 18, 19], [151644, 872, 198]]
    alone = [complete(hybrid, p, 6, cache_prompt=False)["tokens"] for p in prompts]
    results = [None] * len(prompts)

    def run(i):
        results[i] = complete(hybrid, prompts[i], 6, cache_prompt=False)["tokens"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == alone
