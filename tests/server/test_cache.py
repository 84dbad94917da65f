"""The prompt cache: what a follow-up request re-evaluates, and that reuse changes no output."""

import re

# Greedy with a repetition penalty: the random fixture model then writes varied text, so any
# difference in the logits of a cached run would show in the output.
GREEDY = {"temperature": 0, "repeat_penalty": 2.0, "repeat_last_n": 64, "return_tokens": True}


def complete(server, prompt, n_predict, **extra):
    status, body = server.post("/completion", {"prompt": prompt, "n_predict": n_predict, **GREEDY, **extra})
    assert status == 200, body
    return body


def test_two_turns_evaluate_only_the_new_tokens(server, reference):
    turn1_prompt = reference[5]["prompt_tokens"]  # the long agent prompt
    extension = reference[1]["prompt_tokens"]
    session = {"session_id": "two-turns"}

    turn1 = complete(server, turn1_prompt, 8, **session)
    assert turn1["timings"]["prompt_n"] == len(turn1_prompt)
    slot = turn1["id_slot"]
    # Cache after turn 1: the prompt and the generated tokens but the last (never evaluated).
    assert turn1["tokens_cached"] == len(turn1_prompt) + 7

    # Turn 2 continues the conversation: turn 1's prompt, its answer, then new text.
    turn2_prompt = turn1_prompt + turn1["tokens"] + extension
    turn2 = complete(server, turn2_prompt, 8, **session)
    assert turn2["id_slot"] == slot
    assert turn2["timings"]["cache_n"] == len(turn1_prompt) + 7
    assert turn2["timings"]["prompt_n"] == 1 + len(extension)  # the last answer token + the new text
    assert turn2["tokens_evaluated"] == len(turn2_prompt)

    # The same prompt without the cache gives the same text.
    fresh = complete(server, turn2_prompt, 8, cache_prompt=False)
    assert fresh["timings"]["cache_n"] == 0
    assert fresh["timings"]["prompt_n"] == len(turn2_prompt)
    assert fresh["tokens"] == turn2["tokens"]
    assert fresh["content"] == turn2["content"]


def test_extension_of_the_prompt_alone(server, reference):
    base = reference[4]["prompt_tokens"]
    extra = reference[3]["prompt_tokens"]
    session = {"session_id": "extension"}
    complete(server, base, 4, **session)
    second = complete(server, base + extra, 6, **session)
    # The cache held base + 3 answer tokens; the new prompt shares base only (unless the answer
    # happens to start like `extra`, which these fixture tokens do not).
    assert second["timings"]["cache_n"] == len(base)
    assert second["timings"]["prompt_n"] == len(extra)
    fresh = complete(server, base + extra, 6, cache_prompt=False)
    assert fresh["tokens"] == second["tokens"]


def test_identical_prompt_is_answered_from_the_saved_logits(server, reference):
    # The slot kept the logits after the prompt: nothing is evaluated (llama-server evaluates the
    # last prompt token again), and the text is the same.
    prompt = reference[0]["prompt_tokens"]
    session = {"session_id": "identical"}
    first = complete(server, prompt, 5, **session)
    again = complete(server, prompt, 5, **session)
    assert again["timings"]["cache_n"] == len(prompt)
    assert again["timings"]["prompt_n"] == 0
    assert again["tokens"] == first["tokens"]
    # A prompt that ends one token earlier has no saved logits: its last token is evaluated again.
    shorter = complete(server, prompt[:-1], 5, **session)
    assert shorter["timings"]["cache_n"] == len(prompt) - 2 and shorter["timings"]["prompt_n"] == 1
    assert shorter["tokens"] == complete(server, prompt[:-1], 5, cache_prompt=False)["tokens"]


def test_cache_prompt_false_reevaluates_everything(server, reference):
    prompt = reference[0]["prompt_tokens"]
    complete(server, prompt, 2, session_id="nocache")
    body = complete(server, prompt, 2, session_id="nocache", cache_prompt=False)
    assert body["timings"]["cache_n"] == 0
    assert body["timings"]["prompt_n"] == len(prompt)


def test_divergence_is_logged_and_only_the_suffix_is_evaluated(server, reference):
    prompt = reference[5]["prompt_tokens"]
    session = {"session_id": "diverge"}
    complete(server, prompt, 2, **session)
    cut = len(prompt) // 2
    changed = prompt[:cut] + reference[3]["prompt_tokens"]
    body = complete(server, changed, 2, **session)
    assert body["timings"]["cache_n"] == cut
    assert body["timings"]["prompt_n"] == len(changed) - cut
    assert re.search(r"slot %d: prompt diverges from the cache at position %d" % (body["id_slot"], cut), server.log())
    fresh = complete(server, changed, 2, cache_prompt=False)
    assert fresh["tokens"] == body["tokens"]


def test_sessions_keep_their_slots(server, reference):
    a, b = reference[1]["prompt_tokens"], reference[2]["prompt_tokens"]
    first_a = complete(server, a, 2, session_id="alice")
    first_b = complete(server, b, 2, session_id="bob")
    assert first_a["id_slot"] != first_b["id_slot"]
    for _ in range(2):
        again_a = complete(server, a, 2, session_id="alice")
        again_b = complete(server, b, 2, session_id="bob")
        assert again_a["id_slot"] == first_a["id_slot"] and again_a["timings"]["cache_n"] == len(a)
        assert again_b["id_slot"] == first_b["id_slot"] and again_b["timings"]["cache_n"] == len(b)
    _, slots = server.get("/slots")
    assert slots[first_a["id_slot"]]["session_id"] == "alice"


def test_requested_slot(server, reference):
    body = complete(server, reference[3]["prompt_tokens"], 2, id_slot=2)
    assert body["id_slot"] == 2
    again = complete(server, reference[3]["prompt_tokens"], 2, id_slot=2)
    assert again["timings"]["cache_n"] == len(reference[3]["prompt_tokens"])


def test_oai_usage_reports_cached_tokens(server):
    messages = [{"role": "user", "content": "Tell me about prompt caches in inference servers."}]
    body = {"messages": messages, "max_tokens": 3, "temperature": 0, "session_id": "oai-usage"}
    server.post("/v1/chat/completions", body)
    status, second = server.post("/v1/chat/completions", body)
    assert status == 200
    usage = second["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"]
    assert second["timings"]["cache_n"] == usage["prompt_tokens"]


def test_n_predict_zero_only_fills_the_cache(server, reference):
    prompt = reference[2]["prompt_tokens"]
    # A salt of its own: earlier tests' pages of this prompt are not shared with it.
    warm = complete(server, prompt, 0, session_id="prefill", cache_salt="prefill")
    assert warm["tokens_predicted"] == 0 and warm["content"] == "" and warm["stop_type"] == "limit"
    assert warm["timings"]["prompt_n"] == len(prompt) and warm["tokens_cached"] == len(prompt)
    body = complete(server, prompt + reference[3]["prompt_tokens"], 3, session_id="prefill", cache_salt="prefill")
    assert body["timings"]["cache_n"] == len(prompt)
