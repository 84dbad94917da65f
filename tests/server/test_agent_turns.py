"""Agent turns through the chat API (issue #5), on a dense model and a hybrid one.

Turn 1 sends a long history (system prompt of 2000+ tokens and a user message); turn 2 sends the
same messages, turn 1's answer as an assistant message and a new user message, as an agent does.
Turn 2 must evaluate only what is new: the expected split is computed here from the server's own
/apply-template and /tokenize, not taken from the server's accounting.

Reuse stops where turn 2's tokens first differ from what the slot holds. An answer whose text
tokenizes into other tokens than the model generated no longer stops it: chat prompts are aligned
to the cached tokens (src/memory/prompt_align.h), tested below. A chat template that renders an
earlier answer differently from how it rendered the generation prompt still does (llama-server
has the same limit).
"""

import os
import random
import re

import pytest

from conftest import FIXTURES, Server

MODELS = {"dense": "qwen3-micro.gguf", "hybrid": "qwen35moe-micro.gguf"}
TURN1_TOKENS = 6
TURN2_TOKENS = 8
# Greedy with a repetition penalty: the random fixture models then write varied text, so a
# difference in the logits of a cached run would show in the output.
GREEDY = {"temperature": 0, "repeat_penalty": 2.0, "repeat_last_n": 64}


@pytest.fixture(scope="module", params=sorted(MODELS))
def agent(request, tmp_path_factory):
    """(kind, server): 2 slots, room for two long conversations; batch-invariant numerics, so a
    cached turn must give the text of an uncached one."""
    s = Server(tmp_path_factory.mktemp("agent-" + request.param), "-np", "2", "-c", "8192", "--batch-invariant",
               model=os.path.join(FIXTURES, "models", MODELS[request.param]))
    yield request.param, s
    s.stop()
    assert s.proc.returncode == 0, s.log()


def long_system_prompt(seed):
    """A deterministic system prompt of plain English sentences (about 2700 tokens). Each test
    has its own seed: conversations that share no prefix keep the tests independent."""
    rng = random.Random(seed)
    subjects = ["The agent", "The scheduler", "Each slot", "The build", "A tool call", "The user", "The cache",
                "Every test", "The server", "The model"]
    verbs = ["reads", "writes", "checks", "keeps", "drops", "reports", "compares", "opens", "skips", "repeats"]
    objects = ["the prompt", "the log file", "a long history", "the next token", "the test results", "its memory",
               "the repository", "a new request", "the last answer", "every failing case"]
    tails = ["before the next step", "after each turn", "when the queue is empty", "in the same order",
             "without asking", "as the README says", "for the second time", "until nothing changes"]
    sentences = []
    for _ in range(260):
        sentences.append("%s %s %s %s." % (rng.choice(subjects), rng.choice(verbs), rng.choice(objects),
                                           rng.choice(tails)))
    return " ".join(sentences)


def chat(server, messages, max_tokens, **extra):
    status, body = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": max_tokens, **extra})
    assert status == 200, body
    return body


def render(server, messages, **extra):
    status, body = server.post("/apply-template", {"messages": messages, **extra})
    assert status == 200, body
    return body["prompt"]


def tokenize(server, text):
    status, body = server.post("/tokenize", {"content": text})
    assert status == 200, body
    return body["tokens"]


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def session_slot(server, session_id):
    _, slots = server.get("/slots")
    [slot] = [s["id"] for s in slots if s["session_id"] == session_id]
    return slot


def answer_of(body):
    return body["choices"][0]["message"]["content"]


def assert_split(body, n_prompt, n_reused):
    timings, usage = body["timings"], body["usage"]
    assert (timings["cache_n"], timings["prompt_n"]) == (n_reused, n_prompt - n_reused)
    assert usage["prompt_tokens"] == n_prompt
    assert usage["prompt_tokens_details"]["cached_tokens"] == n_reused


def assert_same_text_without_cache(server, messages, turn2, n_prompt, **extra):
    """Turn 2 from the cache against a fresh run. The cached run evaluated turn 1's answer one
    token at a time and turn 2's text as one short batch; the fresh run takes all of it in prompt
    batches. llama.cpp's numerics pick other kernels for those (tinyBLAS / vec_dot, tiled / per-key
    attention), so this server runs with --batch-invariant: then the texts must be equal."""
    fresh = chat(server, messages, TURN2_TOKENS, cache_prompt=False, **GREEDY, **extra)
    assert_split(fresh, n_prompt, 0)  # really recomputed
    assert answer_of(fresh) == answer_of(turn2)


def repeated_token_answer(server, text):
    """logit_bias that makes turn 1's answer `text` repeated; returns (bias, expected answer)."""
    [token] = tokenize(server, text)
    return {str(token): 100}, text * TURN1_TOKENS


def test_second_turn_evaluates_only_the_new_tokens(agent):
    kind, server = agent
    history = [{"role": "system", "content": long_system_prompt(1)},
               {"role": "user", "content": "List the files in the repository."}]
    p1 = render(server, history)
    t1 = tokenize(server, p1)
    assert len(t1) >= 2000

    # Turn 1's answer is made canonical: a random-weight model's greedy answer often does not
    # tokenize back into the tokens it generated (see the next test), which would stop reuse
    # inside the answer. " agent" repeated tokenizes into itself.
    bias, expected_answer = repeated_token_answer(server, " agent")
    turn1 = chat(server, history, TURN1_TOKENS, logit_bias=bias, session_id="agent-1", **GREEDY)
    answer = answer_of(turn1)
    assert answer == expected_answer
    assert turn1["usage"]["prompt_tokens"] == len(t1) and turn1["usage"]["completion_tokens"] == TURN1_TOKENS
    answer_tokens = tokenize(server, answer)
    assert len(answer_tokens) == TURN1_TOKENS and tokenize(server, p1 + answer) == t1 + answer_tokens

    new_message = {"role": "user", "content": "Run the unit tests and report the failures."}
    messages = history + [{"role": "assistant", "content": answer}, new_message]
    p2 = render(server, messages)
    # The template renders the earlier answer as turn 1's generation prompt + the answer + the end
    # of the turn: nothing before it changes.
    assert p2.startswith(p1 + answer + "<|im_end|>\n")
    t2 = tokenize(server, p2)
    assert t2[:len(t1) + TURN1_TOKENS] == t1 + answer_tokens

    log_before = len(server.log())
    turn2 = chat(server, messages, TURN2_TOKENS, session_id="agent-1", **GREEDY)
    # The slot holds turn 1's prompt and answer but its last token (sampled, never evaluated).
    n_reused = len(t1) + TURN1_TOKENS - 1
    assert_split(turn2, len(t2), n_reused)
    # Evaluated: that last answer token, then the end of turn, the new message and the generation
    # prompt (the text after the answer starts with a special token, so it tokenizes alone alike).
    assert turn2["timings"]["prompt_n"] == 1 + len(tokenize(server, p2[len(p1 + answer):]))
    turn2_log = server.log()[log_before:]
    assert "diverges" not in turn2_log and "rolled back" not in turn2_log, turn2_log

    assert_same_text_without_cache(server, messages, turn2, len(t2))


# A random-weight model often generates tokens that BPE would merge. The slot holds the generated
# tokens, turn 2's text tokenizes into merged ones: "a" six times is "aaaaaa" in longer tokens; "\n"
# six times merges with the "\n" that ends the generation prompt, one token before the answer.
# The server aligns a chat prompt to the cached tokens (prompt_align.h): as long as their text is
# a prefix of the new prompt's text they are kept, and only the rest is tokenized. So turn 2
# reuses the whole cache, dense and hybrid, with no rollback.
@pytest.mark.parametrize("piece", ["a", "\n"], ids=["a", "newline"])
def test_answer_that_tokenizes_differently_is_reused_as_generated(agent, piece):
    kind, server = agent
    session = "agent-2-%d" % len(piece.strip())
    history = [{"role": "system", "content": long_system_prompt(2 + (piece == "\n"))},
               {"role": "user", "content": "Summarize the build log in one line."}]
    p1 = render(server, history)
    t1 = tokenize(server, p1)

    bias, expected_answer = repeated_token_answer(server, piece)
    turn1 = chat(server, history, TURN1_TOKENS, logit_bias=bias, session_id=session, **GREEDY)
    answer = answer_of(turn1)
    assert answer == expected_answer
    generated = t1 + tokenize(server, piece) * TURN1_TOKENS
    messages = history + [{"role": "assistant", "content": answer},
                          {"role": "user", "content": "Which test failed first?"}]
    p2 = render(server, messages)
    t2 = tokenize(server, p2)
    cached = generated[:-1]  # the last sampled token is never evaluated
    # Tokenized on its own, turn 2 differs from the cache inside (or just before) the answer.
    assert common_prefix(cached, t2) < len(cached)
    status, body = server.post("/detokenize", {"tokens": cached})
    cached_text = body["content"]
    assert p2.startswith(cached_text)
    expected_prompt = cached + tokenize(server, p2[len(cached_text):])

    log_before = len(server.log())
    turn2 = chat(server, messages, TURN2_TOKENS, session_id=session, **GREEDY)
    assert_split(turn2, len(expected_prompt), len(cached))
    log = server.log()[log_before:]
    assert "diverges" not in log and "rolled back" not in log, log

    assert_same_text_without_cache(server, messages, turn2, len(expected_prompt))


def test_template_that_drops_the_empty_think_block(agent):
    # With enable_thinking false, Qwen3's template ends the generation prompt with an empty
    # "<think>\n\n</think>\n\n" block but renders earlier answers without it: turn 2 differs from
    # what the slot holds at that block, before the answer. Dense reuses up to there. Hybrid goes
    # back to the checkpoint taken 64 tokens before the end of turn 1's prompt or at the end of the
    # system message, whichever is later (the end-of-prompt
    # checkpoint lies after the difference) and re-evaluates those 64 tokens, as llama-server does.
    kind, server = agent
    no_thinking = {"chat_template_kwargs": {"enable_thinking": False}}
    history = [{"role": "system", "content": long_system_prompt(4)},
               {"role": "user", "content": "Open the failing test."}]
    p1 = render(server, history, **no_thinking)
    assert p1.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    t1 = tokenize(server, p1)

    bias, expected_answer = repeated_token_answer(server, " agent")
    turn1 = chat(server, history, TURN1_TOKENS, logit_bias=bias, session_id="agent-3", **GREEDY, **no_thinking)
    answer = answer_of(turn1)
    assert answer == expected_answer
    messages = history + [{"role": "assistant", "content": answer},
                          {"role": "user", "content": "Now fix it."}]
    p2 = render(server, messages, **no_thinking)
    think_block = len(p1) - len("<think>\n\n</think>\n\n")
    assert p2.startswith(p1[:think_block] + answer + "<|im_end|>\n")
    t2 = tokenize(server, p2)
    divergence = common_prefix(t1, t2)
    assert divergence == len(tokenize(server, p1[:think_block])) and divergence > len(t1) - 64

    log_before = len(server.log())
    turn2 = chat(server, messages, TURN2_TOKENS, session_id="agent-3", **GREEDY, **no_thinking)
    n_system = len(tokenize(server, render(server, history[:1], add_generation_prompt=False)))
    n_reused = divergence if kind == "dense" else max(len(t1) - 64, n_system)
    assert_split(turn2, len(t2), n_reused)
    slot = session_slot(server, "agent-3")
    log = server.log()[log_before:]
    assert "slot %d: prompt diverges from the cache at position %d" % (slot, divergence) in log, log
    if kind == "hybrid":
        assert "slot %d: rolled back to the checkpoint after token %d" % (slot, n_reused) in log, log

    assert_same_text_without_cache(server, messages, turn2, len(t2), **no_thinking)


def test_a_cache_ending_inside_a_word_does_not_change_the_prompt(agent):
    # Another conversation's cache whose text ends inside a word of the new prompt ("... chalk" and
    # then "<|im_end|>", against "... chalkboard ..."): the new word keeps the prompt's own tokens,
    # so the prompt, and the greedy answer, are those of a run without that cache.
    kind, server = agent
    stem = long_system_prompt(7)[:400]
    word = None
    for head, tail in [("chalk", "board"), ("book", "keeping"), ("sun", "flower"), ("water", "fall"), ("fire", "works")]:
        if tokenize(server, " " + head + tail) != tokenize(server, " " + head) + tokenize(server, tail):
            word = (head, tail)
            break
    assert word, "no word of the list tokenizes as one piece"
    head, tail = word
    first = [{"role": "user", "content": stem + " " + head}]
    second = [{"role": "user", "content": stem + " " + head + tail + " is here"}]
    chat(server, first, 2, session_id="word-a", **GREEDY)
    t2 = tokenize(server, render(server, second))
    turn = chat(server, second, TURN2_TOKENS, session_id="word-a", **GREEDY)
    assert turn["timings"]["cache_n"] + turn["timings"]["prompt_n"] == len(t2)
    if kind == "dense":  # hybrid: no snapshot inside the shared text, the prompt is evaluated whole
        assert turn["timings"]["cache_n"] > 0
    assert_same_text_without_cache(server, second, turn, len(t2))


def test_answer_is_aligned_to_the_pages_an_ended_conversation_left(agent):
    # Turn 1's slot serves another conversation before turn 2 comes: no slot holds turn 1's
    # tokens any more, only the cached pages its end published. A chat prompt is aligned to those
    # too (the chain of pages whose text the prompt's text continues): the answer, generated as
    # "a" and "b" tokens that BPE merges otherwise ("ab", "bbbb"), is kept as generated up to the
    # last point where the prompt's own tokenization has a boundary too. The memory holds no
    # sampled-but-unevaluated last token for pages, so the alignment stops at most one token before
    # the answer's end.
    kind, server = agent
    history = [{"role": "system", "content": long_system_prompt(9)},
               {"role": "user", "content": "List the failing tests."}]
    t1 = tokenize(server, render(server, history))
    [tok_a] = tokenize(server, "a")
    [tok_b] = tokenize(server, "b")
    bias = {str(tok_a): 100, str(tok_b): 100}
    turn1 = chat(server, history, 12, logit_bias=bias, session_id="pages-x", **GREEDY)
    answer = answer_of(turn1)
    generated = [tok_a if piece == "a" else tok_b for piece in answer]
    assert set(answer) <= {"a", "b"}, answer
    cached = t1 + generated[:-1]  # what the pages hold: the last sampled token is never evaluated

    # Another conversation takes turn 1's slot.
    chat(server, [{"role": "user", "content": "Say something else."}], 2, session_id="pages-y",
         id_slot=session_slot(server, "pages-x"), **GREEDY)
    _, slots = server.get("/slots")
    assert all(s["session_id"] != "pages-x" for s in slots), slots

    messages = history + [{"role": "assistant", "content": answer}, {"role": "user", "content": "And the first one?"}]
    p2 = render(server, messages)
    t2 = tokenize(server, p2)
    # The alignment, computed here from the pieces: the cached tokens whose text starts p2, cut back
    # to the last offset where t2 has a token boundary too, then t2's own tokens.
    pieces = {t: server.post("/detokenize", {"tokens": [t]})[1]["content"] for t in set(cached) | set(t2)}
    boundary, off = {0: 0}, 0
    for i, t in enumerate(t2):
        off += len(pieces[t])
        boundary[off] = i + 1
    keep, keep_t2, off = 0, 0, 0
    for i, t in enumerate(cached):
        if not p2.startswith(pieces[t], off):
            break
        off += len(pieces[t])
        if off in boundary:
            keep, keep_t2 = i + 1, boundary[off]
    assert keep > common_prefix(cached, t2) + 1, "the answer tokenizes as generated: nothing to align"
    expected_prompt = cached[:keep] + t2[keep_t2:]

    turn2 = chat(server, messages, TURN2_TOKENS, session_id="pages-x", **GREEDY)
    assert turn2["usage"]["prompt_tokens"] == len(expected_prompt)
    if kind == "dense":
        assert turn2["timings"]["cache_n"] == keep  # every aligned token from the pages
    else:  # hybrid: up to the latest snapshot at or before the aligned part's end
        assert turn2["timings"]["cache_n"] >= len(t1) - 64
    assert_same_text_without_cache(server, messages, turn2, len(expected_prompt))
