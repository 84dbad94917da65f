"""POST /infill (llama-server's): the fill-in-the-middle prompt built as llama.cpp's
format_prompt_infill builds it (repo-level pattern: extra files, then prefix + prompt, suffix,
middle), generation as /completion; a model without FIM tokens gets 501."""

import os

from conftest import REPO, Server

TRAINED = os.path.join(REPO, "trained", "agentkv-tiny", "model.gguf")  # its 4,096-token vocabulary has no FIM tokens
REQUEST = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n",
           "input_extra": [{"filename": "util.py", "text": "import os\n"}, {"text": "x = 1\n"}], "prompt": "return",
           "n_predict": 6, "temperature": 0, "return_tokens": True}
# The Qwen3 vocabulary's FIM tokens; "<|repo_name|>" is its repo token, as llama.cpp finds it.
EXPECTED_PROMPT = ("<|repo_name|>myproject\n<|file_sep|>util.py\nimport os\n<|file_sep|>tmp\nx = 1\n<|file_sep|>filename\n"
                   "<|fim_prefix|>def add(a, b):\n    return<|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>")


def test_infill_builds_llama_servers_prompt_and_completes_it(tmp_path):
    s = Server(tmp_path, "-np", "1", "--slots-show-prompts")
    try:
        status, body = s.post("/infill", REQUEST)
        assert status == 200, body
        _, slots = s.get("/slots")
        assert slots[0]["prompt"].startswith(EXPECTED_PROMPT), slots[0]["prompt"]
        def ids(text, special=False):
            _, out = s.post("/tokenize", {"content": text, "parse_special": special})
            return out["tokens"]
        rep, sep, pre, suf, mid = (ids(t, True) for t in ("<|repo_name|>", "<|file_sep|>", "<|fim_prefix|>",
                                                          "<|fim_suffix|>", "<|fim_middle|>"))
        # Each piece tokenized alone, as llama.cpp's format_prompt_infill does.
        want = (rep + ids("myproject\n") + sep + ids("util.py\n") + ids("import os\n") + sep + ids("tmp\n") +
                ids("x = 1\n") + sep + ids("filename\n") + pre + ids(REQUEST["input_prefix"]) + ids("return", True) +
                suf + ids(REQUEST["input_suffix"]) + mid)
        assert body["tokens_evaluated"] == len(want)
        status, same = s.post("/completion", {"prompt": want, "n_predict": 6, "temperature": 0,
                                              "return_tokens": True, "cache_prompt": False})
        assert status == 200 and same["tokens"] == body["tokens"] and same["content"] == body["content"]
        # llama-server's validation, in its order.
        for bad, code, why in (({"input_suffix": "x"}, 400, '"input_prefix" is required'),
                               ({"input_prefix": "x"}, 400, '"input_suffix" is required'),
                               ({"input_prefix": "x", "input_suffix": "y", "prompt": 3}, 400, '"prompt" must be a string'),
                               ({"input_prefix": "x", "input_suffix": "y", "input_extra": {}}, 400, "must be an array"),
                               ({"input_prefix": "x", "input_suffix": "y", "input_extra": [{"filename": "a"}]}, 400,
                                '"text" field'),
                               ({"input_prefix": "x", "input_suffix": "y", "input_extra": [{"text": "t", "filename": 1}]},
                                400, '"filename" field must be a string'),
                               ({"input_prefix": "x", "input_suffix": "y", "bogus": 1}, 400, "bogus")):
            status, err = s.post("/infill", bad)
            assert status == code and why in err["error"]["message"], (bad, err)
    finally:
        s.stop()


def test_a_model_without_fim_tokens_gets_501(tmp_path):
    s = Server(tmp_path, "-np", "1", model=TRAINED)
    try:
        status, err = s.post("/infill", {"input_prefix": "a", "input_suffix": "b"})
        assert status == 501 and err["error"]["type"] == "not_supported_error"
        assert "Infill is not supported by this model: prefix token is missing." in err["error"]["message"]
    finally:
        s.stop()
