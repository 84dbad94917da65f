"""--chat-template NAME (issue 21): llama.cpp's built-in formats by name, rendered as llama.cpp
renders them, or a Jinja template given on the command line."""

import pytest

from conftest import Server

MESSAGES = [{"role": "system", "content": " You are a test. "}, {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Again"}]

EXPECTED = {
    "command-r": "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
                 "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
                 "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello<|END_OF_TURN_TOKEN|>"
                 "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Again<|END_OF_TURN_TOKEN|>"
                 "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    "llama3": "<|start_header_id|>system<|end_header_id|>\n\nYou are a test.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nAgain<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "gemma": "<start_of_turn>user\nYou are a test.\n\nHi there<end_of_turn>\n"
             "<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>user\nAgain<end_of_turn>\n"
             "<start_of_turn>model\n",
    "phi3": "<|system|>\n You are a test. <|end|>\n<|user|>\nHi there<|end|>\n<|assistant|>\nHello<|end|>\n"
            "<|user|>\nAgain<|end|>\n<|assistant|>\n",
    "zephyr": "<|system|>\n You are a test. <|endoftext|>\n<|user|>\nHi there<|endoftext|>\n"
              "<|assistant|>\nHello<|endoftext|>\n<|user|>\nAgain<|endoftext|>\n<|assistant|>\n",
    "chatml": "<|im_start|>system\n You are a test. <|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
              "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n",
}

# What add_generation_prompt appends.
GENERATION_PROMPT = {"command-r": "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
                     "llama3": "<|start_header_id|>assistant<|end_header_id|>\n\n", "gemma": "<start_of_turn>model\n",
                     "phi3": "<|assistant|>\n", "zephyr": "<|assistant|>\n", "chatml": "<|im_start|>assistant\n"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_named_templates_render_as_llama_cpp(tmp_path, name):
    s = Server(tmp_path, "-np", "1", "-c", "512", "--chat-template", name)
    try:
        status, out = s.post("/apply-template", {"messages": MESSAGES})
        assert status == 200, out
        assert out["prompt"] == EXPECTED[name]
        status, out = s.post("/apply-template", {"messages": MESSAGES, "add_generation_prompt": False})
        assert status == 200 and out["prompt"] == EXPECTED[name][:-len(GENERATION_PROMPT[name])]
        # the rule against both add_generation_prompt and continue_final_message holds with any template
        status, _ = s.post("/v1/chat/completions", {"messages": MESSAGES[:3], "add_generation_prompt": True,
                                                    "continue_final_message": True, "max_tokens": 1})
        assert status == 400
    finally:
        s.stop()


def test_a_jinja_template_on_the_command_line(tmp_path):
    s = Server(tmp_path, "-np", "1", "-c", "512", "--chat-template",
               "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[bot]{% endif %}")
    try:
        status, out = s.post("/apply-template", {"messages": MESSAGES[1:2]})
        assert status == 200 and out["prompt"] == "[user]Hi there[bot]"
    finally:
        s.stop()
