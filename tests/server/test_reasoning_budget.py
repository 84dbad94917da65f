"""The reasoning budget (llama-server's --reasoning-budget, requests' reasoning_budget_tokens /
thinking_budget_tokens; server/reasoning_budget.h): once an answer has reasoned that many tokens,
the end of its reasoning block is forced and the answer follows. On gpt-oss-micro with
tool_choice "required" the harmony grammar lets an analysis message come first, which the
random-weight model does not end by itself: the budget bounds it, and 0 leaves it empty."""

import pytest

from conftest import Server, model_file

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string", "maxLength": 12}}, "required": ["path"]}}}]


def ask(server, **extra):
    # A question after which this model starts with an analysis message.
    body = {"messages": [{"role": "user", "content": "List files"}], "tools": TOOLS, "tool_choice": "required",
            "max_tokens": 300, "temperature": 0, "return_tokens": True, **extra}
    status, r = server.post("/v1/chat/completions", body)
    assert status == 200, r
    return r


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("budget"), "-np", "1", "-c", "4096", model=model_file("gpt-oss"))
    yield s
    s.stop()


def answer(r):
    """The message without its random call ids."""
    m = r["choices"][0]["message"]
    return m.get("reasoning_content"), [c["function"] for c in m["tool_calls"]]


def test_the_analysis_message_stays_within_the_budget(server):
    # This model writes the channel tags as plain text, so the token that completes the opening
    # tag may carry the first letters of the analysis: the budget counts the tokens after it.
    texts = []
    for budget in [0, 3, 12]:
        r = ask(server, reasoning_budget_tokens=budget)
        choice = r["choices"][0]
        assert choice["finish_reason"] == "tool_calls", choice
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "read_file"
        texts.append(choice["message"].get("reasoning_content") or "")
    # Greedy: each budget lets the same analysis run further, and 0 ends it at once.
    assert len(texts[0]) <= 4, texts
    assert texts[1].startswith(texts[0]) and texts[2].startswith(texts[1]), texts
    assert len(texts[0]) < len(texts[1]) < len(texts[2]), texts
    unbounded = ask(server, max_tokens=120)
    assert unbounded["choices"][0]["finish_reason"] == "length"  # it never ends the analysis by itself


def test_thinking_budget_tokens_is_the_same_field_and_the_flag_is_the_default(tmp_path, server):
    a = ask(server, reasoning_budget_tokens=3)
    b = ask(server, thinking_budget_tokens=3)
    assert answer(a) == answer(b)
    flagged = Server(tmp_path, "-np", "1", "-c", "4096", "--reasoning-budget", "3", model=model_file("gpt-oss"))
    try:
        c = ask(flagged)
        assert answer(c) == answer(a)
        status, err = flagged.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                            "reasoning_budget_tokens": -2})
        assert status == 400, err
    finally:
        flagged.stop()
