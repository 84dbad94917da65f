// Tests for the chat-template interpreter (include/agentkv/chat_template.h).
//
// Every expected rendering below was produced by Python jinja2 3.1.6 configured the way Hugging
// Face transformers renders chat templates (ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and loop controls; tojson = json.dumps(ensure_ascii=False); raise_exception) and
// committed as a literal: the test itself never runs Python. Templates: Qwen3's, read from the
// tokenizer fixture (the one the GGUF fixtures carry), and Qwen3.5's, embedded below.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "agentkv/error.h"
#include "agentkv/chat_template.h"
#include "fixtures.h"

namespace {

using agentkv::ChatTemplate;
using agentkv::ChatTemplateInputs;
using Json = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const std::string& qwen3_template() {
  static const std::string source =
      Json::parse(read_file(std::string(AGENTKV_FIXTURES_DIR) + "/tokenizer/qwen3-tokenizer_config.json"))
          .at("chat_template")
          .get<std::string>();
  return source;
}

// Qwen3.5's chat template (Qwen team, Apache-2.0): macros, typed content parts, vision
// placeholders, loop.previtem / loop.nextitem and XML-style tool calls.
const char* const kQwen35Template = R"JINJA({%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- macro render_content(content, do_vision_count, is_system_content=false) %}
    {%- if content is string %}
        {{- content }}
    {%- elif content is iterable and content is not mapping %}
        {%- for item in content %}
            {%- if 'image' in item or 'image_url' in item or item.type == 'image' %}
                {%- if is_system_content %}
                    {{- raise_exception('System message cannot contain images.') }}
                {%- endif %}
                {%- if do_vision_count %}
                    {%- set image_count.value = image_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}
                    {{- 'Picture ' ~ image_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' }}
            {%- elif 'video' in item or item.type == 'video' %}
                {%- if is_system_content %}
                    {{- raise_exception('System message cannot contain videos.') }}
                {%- endif %}
                {%- if do_vision_count %}
                    {%- set video_count.value = video_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}
                    {{- 'Video ' ~ video_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' }}
            {%- elif 'text' in item %}
                {{- item.text }}
            {%- else %}
                {{- raise_exception('Unexpected item type in content.') }}
            {%- endif %}
        {%- endfor %}
    {%- elif content is none or content is undefined %}
        {{- '' }}
    {%- else %}
        {{- raise_exception('Unexpected content type.') }}
    {%- endif %}
{%- endmacro %}
{%- if not messages %}
    {{- raise_exception('No messages provided.') }}
{%- endif %}
{%- if tools and tools is iterable and tools is not mapping %}
    {{- '<|im_start|>system\n' }}
    {{- "# Tools\n\nYou have access to the following functions:\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>" }}
    {{- '\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>' }}
    {%- if messages[0].role == 'system' %}
        {%- set content = render_content(messages[0].content, false, true)|trim %}
        {%- if content %}
            {{- '\n\n' + content }}
        {%- endif %}
    {%- endif %}
    {{- '<|im_end|>\n' }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {%- set content = render_content(messages[0].content, false, true)|trim %}
        {{- '<|im_start|>system\n' + content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set content = render_content(message.content, false)|trim %}
        {%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
            {%- set ns.multi_step_tool = false %}
            {%- set ns.last_query_index = index %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if ns.multi_step_tool %}
    {{- raise_exception('No user query found in messages.') }}
{%- endif %}
{%- for message in messages %}
    {%- set content = render_content(message.content, true)|trim %}
    {%- if message.role == "system" %}
        {%- if not loop.first %}
            {{- raise_exception('System message must be at the beginning.') }}
        {%- endif %}
    {%- elif message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- set reasoning_content = reasoning_content|trim %}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content + '\n</think>\n\n' + content }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls and message.tool_calls is iterable and message.tool_calls is not mapping %}
            {%- for tool_call in message.tool_calls %}
                {%- if tool_call.function is defined %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {%- if loop.first %}
                    {%- if content|trim %}
                        {{- '\n\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
                    {%- else %}
                        {{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}
                    {%- endif %}
                {%- else %}
                    {{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
                {%- endif %}
                {%- if tool_call.arguments is mapping %}
                    {%- for args_name in tool_call.arguments %}
                        {%- set args_value = tool_call.arguments[args_name] %}
                        {{- '<parameter=' + args_name + '>\n' }}
                        {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}
                        {{- args_value }}
                        {{- '\n</parameter>\n' }}
                    {%- endfor %}
                {%- endif %}
                {{- '</function>\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- elif loop.last %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unexpected message role.') }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}
)JINJA";

// Splits a JSON context the way Hugging Face passes it: messages / tools / add_generation_prompt
// are fields of ChatTemplateInputs, everything else is extra context.
ChatTemplateInputs inputs_from(Json context) {
  ChatTemplateInputs inputs;
  if (context.contains("messages")) {
    inputs.messages = context["messages"];
    context.erase("messages");
  }
  if (context.contains("tools")) {
    inputs.tools = context["tools"];
    context.erase("tools");
  }
  if (context.contains("add_generation_prompt")) {
    inputs.add_generation_prompt = context["add_generation_prompt"].get<bool>();
    context.erase("add_generation_prompt");
  }
  inputs.extra_context = std::move(context);
  return inputs;
}

std::string render(const std::string& source, const Json& context = Json::object()) {
  return ChatTemplate(source).render(inputs_from(context));
}

// The message of the agentkv::Error that rendering throws ("" and a test failure otherwise).
std::string render_error(const std::string& source, const Json& context = Json::object()) {
  try {
    render(source, context);
  } catch (const agentkv::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for: " << source;
  return "";
}

// ---- the Qwen templates ---------------------------------------------------------------------

enum class Which { kQwen3, kQwen35 };

struct Scenario {
  const char* name;
  Which which;
  const char* context;
  const char* expected;
};

const Scenario kScenarios[] = {
    {"qwen3_system_user", Which::kQwen3,
     R"T({"messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello!"}], "add_generation_prompt": true})T",
     R"T(<|im_start|>system
You are a helpful assistant.<|im_end|>
<|im_start|>user
Hello!<|im_end|>
<|im_start|>assistant
)T"},
    {"qwen3_multi_turn_think_history", Which::kQwen3,
     R"T({"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n4"}, {"role": "user", "content": "And 3+3?"}], "add_generation_prompt": true})T",
     R"T(<|im_start|>system
You are terse.<|im_end|>
<|im_start|>user
What is 2+2?<|im_end|>
<|im_start|>assistant
4<|im_end|>
<|im_start|>user
And 3+3?<|im_end|>
<|im_start|>assistant
)T"},
    {"qwen3_reasoning_content_field", Which::kQwen3,
     R"T({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there.", "reasoning_content": "Greet back."}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye!", "reasoning_content": "\nSay bye.\n"}], "add_generation_prompt": false})T",
     R"T(<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
Hello there.<|im_end|>
<|im_start|>user
Bye<|im_end|>
<|im_start|>assistant
<think>
Say bye.
</think>

Goodbye!<|im_end|>
)T"},
    {"qwen3_tools_and_calls", Which::kQwen3,
     R"T({"messages": [{"role": "system", "content": "Use tools when helpful."}, {"role": "user", "content": "Weather in Zürich and the time?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}, {"type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": \"CET\"}"}}]}, {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "12:00"}, {"role": "assistant", "content": "<think>\nBoth tools answered.\n</think>\n\nIt is 21 °C and 12:00."}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}, {"type": "function", "function": {"name": "get_time", "description": "Current time", "parameters": {"type": "object", "properties": {}}}}], "add_generation_prompt": false})T",
     R"T(<|im_start|>system
Use tools when helpful.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
{"type": "function", "function": {"name": "get_time", "description": "Current time", "parameters": {"type": "object", "properties": {}}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather in Zürich and the time?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}
</tool_call>
<tool_call>
{"name": "get_time", "arguments": {"tz": "CET"}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response>
<tool_response>
12:00
</tool_response><|im_end|>
<|im_start|>assistant
<think>
Both tools answered.
</think>

It is 21 °C and 12:00.<|im_end|>
)T"},
    {"qwen3_tool_call_with_text_then_gen", Which::kQwen3,
     R"T({"messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "Let me check.", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2], "opts": {"a": null, "b": true, "c": 1.5}}}}]}, {"role": "tool", "content": "sunny"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}], "add_generation_prompt": true})T",
     R"T(<|im_start|>system
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
Let me check.
<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2], "opts": {"a": null, "b": true, "c": 1.5}}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
sunny
</tool_response><|im_end|>
<|im_start|>assistant
)T"},
    {"qwen3_enable_thinking_false", Which::kQwen3,
     R"T({"messages": [{"role": "user", "content": "Quick answer please."}], "add_generation_prompt": true, "enable_thinking": false})T",
     R"T(<|im_start|>user
Quick answer please.<|im_end|>
<|im_start|>assistant
<think>

</think>

)T"},
    {"qwen3_user_only_no_gen", Which::kQwen3,
     R"T({"messages": [{"role": "user", "content": "  spaced  \n"}], "add_generation_prompt": false})T",
     R"T(<|im_start|>user
  spaced  
<|im_end|>
)T"},
    {"qwen35_system_user", Which::kQwen35,
     R"T({"messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello!"}], "add_generation_prompt": true})T",
     R"T(<|im_start|>system
You are a helpful assistant.<|im_end|>
<|im_start|>user
Hello!<|im_end|>
<|im_start|>assistant
<think>
)T"},
    {"qwen35_multi_turn_think_history", Which::kQwen35,
     R"T({"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n4"}, {"role": "user", "content": "And 3+3?"}], "add_generation_prompt": true})T",
     R"T(<|im_start|>system
You are terse.<|im_end|>
<|im_start|>user
What is 2+2?<|im_end|>
<|im_start|>assistant
4<|im_end|>
<|im_start|>user
And 3+3?<|im_end|>
<|im_start|>assistant
<think>
)T"},
    {"qwen35_reasoning_content_field", Which::kQwen35,
     R"T({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there.", "reasoning_content": "Greet back."}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye!", "reasoning_content": "\nSay bye.\n"}], "add_generation_prompt": false})T",
     R"T(<|im_start|>user
Hi<|im_end|>
<|im_start|>assistant
Hello there.<|im_end|>
<|im_start|>user
Bye<|im_end|>
<|im_start|>assistant
<think>
Say bye.
</think>

Goodbye!<|im_end|>
)T"},
    {"qwen35_tools_and_calls", Which::kQwen35,
     R"T({"messages": [{"role": "system", "content": "Use tools when helpful."}, {"role": "user", "content": "Weather in Zürich and the time?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}, {"type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": \"CET\"}"}}]}, {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "tool", "content": "12:00"}, {"role": "assistant", "content": "<think>\nBoth tools answered.\n</think>\n\nIt is 21 °C and 12:00."}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}, {"type": "function", "function": {"name": "get_time", "description": "Current time", "parameters": {"type": "object", "properties": {}}}}], "add_generation_prompt": false})T",
     R"T(<|im_start|>system
# Tools

You have access to the following functions:

<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
{"type": "function", "function": {"name": "get_time", "description": "Current time", "parameters": {"type": "object", "properties": {}}}}
</tools>

If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>
</tool_call>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags
- Required parameters MUST be specified
- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after
- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls
</IMPORTANT>

Use tools when helpful.<|im_end|>
<|im_start|>user
Weather in Zürich and the time?<|im_end|>
<|im_start|>assistant
<think>

</think>

<tool_call>
<function=get_weather>
<parameter=city>
Zürich
</parameter>
<parameter=unit>
celsius
</parameter>
</function>
</tool_call>
<tool_call>
<function=get_time>
</function>
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
{"temp": 21}
</tool_response>
<tool_response>
12:00
</tool_response><|im_end|>
<|im_start|>assistant
<think>
Both tools answered.
</think>

It is 21 °C and 12:00.<|im_end|>
)T"},
    {"qwen35_tool_call_with_text_then_gen", Which::kQwen35,
     R"T({"messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "Let me check.", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2], "opts": {"a": null, "b": true, "c": 1.5}}}}]}, {"role": "tool", "content": "sunny"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}], "add_generation_prompt": true})T",
     R"T(<|im_start|>system
# Tools

You have access to the following functions:

<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
</tools>

If you choose to call a function ONLY reply in the following format with NO suffix:

<tool_call>
<function=example_function_name>
<parameter=example_parameter_1>
value_1
</parameter>
<parameter=example_parameter_2>
This is the value for the second parameter
that can span
multiple lines
</parameter>
</function>
</tool_call>

<IMPORTANT>
Reminder:
- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags
- Required parameters MUST be specified
- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after
- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls
</IMPORTANT><|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<think>

</think>

Let me check.

<tool_call>
<function=get_weather>
<parameter=city>
Paris
</parameter>
<parameter=days>
[1, 2]
</parameter>
<parameter=opts>
{"a": null, "b": true, "c": 1.5}
</parameter>
</function>
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
sunny
</tool_response><|im_end|>
<|im_start|>assistant
<think>
)T"},
    {"qwen35_enable_thinking_false", Which::kQwen35,
     R"T({"messages": [{"role": "user", "content": "Quick answer please."}], "add_generation_prompt": true, "enable_thinking": false})T",
     R"T(<|im_start|>user
Quick answer please.<|im_end|>
<|im_start|>assistant
<think>

</think>

)T"},
    {"qwen35_user_only_no_gen", Which::kQwen35,
     R"T({"messages": [{"role": "user", "content": "  spaced  \n"}], "add_generation_prompt": false})T",
     R"T(<|im_start|>user
spaced<|im_end|>
)T"}
};

class QwenTemplate : public testing::TestWithParam<Scenario> {};

TEST_P(QwenTemplate, RendersLikeTransformers) {
  const Scenario& s = GetParam();
  if (s.which == Which::kQwen3) AGENTKV_NEEDS_FIXTURES();
  const std::string source = s.which == Which::kQwen3 ? qwen3_template() : std::string(kQwen35Template);
  EXPECT_EQ(render(source, Json::parse(s.context)), s.expected);
}

INSTANTIATE_TEST_SUITE_P(Scenarios, QwenTemplate, testing::ValuesIn(kScenarios),
                         [](const testing::TestParamInfo<Scenario>& info) { return std::string(info.param.name); });

TEST(QwenTemplate, SystemUserWithGenerationPrompt) {
  AGENTKV_NEEDS_FIXTURES();
  ChatTemplateInputs inputs;
  inputs.messages = Json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  inputs.add_generation_prompt = true;
  EXPECT_EQ(ChatTemplate(qwen3_template()).render(inputs),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

TEST(QwenTemplate, ParsedOnceRendersRepeatedly) {
  ChatTemplate tmpl(kQwen35Template);
  ChatTemplateInputs inputs;
  inputs.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  const std::string first = tmpl.render(inputs);
  EXPECT_EQ(first, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(tmpl.render(inputs), first);
  ChatTemplate moved = std::move(tmpl);
  EXPECT_EQ(moved.render(inputs), first);
}

TEST(QwenTemplate, ToolKeysKeepTheClientsOrder) {
  AGENTKV_NEEDS_FIXTURES();
  // Hugging Face serialises tools in insertion order; alphabetical order would put
  // "function" before "type" and change the prompt.
  ChatTemplateInputs inputs;
  inputs.messages = Json::parse(R"([{"role": "user", "content": "x"}])");
  inputs.tools = Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])");
  const std::string out = ChatTemplate(qwen3_template()).render(inputs);
  EXPECT_NE(out.find(R"({"type": "function", "function": {"name": "f", "parameters": {}}})"), std::string::npos) << out;
}

TEST(QwenTemplate, TemplateErrorsSurfaceAsAgentkvError) {
  AGENTKV_NEEDS_FIXTURES();
  // Qwen3.5 refuses a conversation without a user turn through raise_exception().
  const std::string message =
      render_error(kQwen35Template, Json::parse(R"({"messages": [{"role": "assistant", "content": "x"}]})"));
  EXPECT_NE(message.find("No user query found in messages."), std::string::npos) << message;
  // Qwen3 calls string methods on content, so null content fails as it does in transformers.
  const std::string null_content = render_error(
      qwen3_template(),
      Json::parse(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null}]})"));
  EXPECT_NE(null_content.find("line "), std::string::npos) << null_content;
}

// ---- language features, checked against jinja2 ----------------------------------------------

struct FeatureCase {
  const char* source;
  const char* context;
  const char* expected;  // nullptr: jinja2 raises, so must we
};

const FeatureCase kFeatureCases[] = {
    {R"T({% for i in [1,2] %}{% if i == 1 %}{% set x = "a" %}{% endif %}[{{ x }}]{% endfor %}[{{x}}])T",
     R"T({})T",
     R"T([a][][])T"},
    {R"T(a  
  {% if true %}
  x
  {% endif %}
 b
)T",
     R"T({})T",
     R"T(a  
  x
 b)T"},
    {R"T(a
  {# c #}
b)T",
     R"T({})T",
     R"T(a
b)T"},
    {R"T({{ 1 + 2 is number }}|{{ [1,2]|length - 1 }}|{{ "a" ~ 1 + 2 if false else 3 }})T",
     R"T({})T",
     R"T(2|1|3)T"},
    {R"T({{ none }}|{{ true }}|{{ [1,"a",none,1.5] }}|{{ {"a":1} }}|{{ 1e16 }}|{{ 0.1 }}|{{ 3.0 }}|{{ 1e-5}}|{{ 10/2 }}|{{ 7//2 }}|{{ -7//2 }}|{{ -7%3 }}|{{ 2**10 }})T",
     R"T({})T",
     R"T(None|True|[1, 'a', None, 1.5]|{'a': 1}|1e+16|0.1|3.0|1e-05|5.0|3|-4|2|1024)T"},
    {R"T({{ undefined_x is iterable }}|{{ {} is sequence }}|{{ true is number }}|{{ "" is iterable }})T",
     R"T({})T",
     R"T(True|True|True|True)T"},
    {R"T({{ x.y is defined }})T",
     R"T({})T",
     nullptr},
    {R"T({% macro f(a, b=2) %}{{a}}-{{b}}-{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1) }}|{{ f(1, 3) }}|{{ f(b=5, a=1) }})T",
     R"T({})T",
     R"T(1-2-(){}|1-3-(){}|1-5-(){})T"},
    {R"T({{ "a\tb\u00e9\x41\q" }})T",
     R"T({})T",
     R"T(a	béA\q)T"},
    {R"T({{ (1,2)|list }}|{{ "abc"[::-1] }}|{{ [1,2,3][1:] }}|{{ "héllo"|length }}|{{ "héllo"[1] }}|{{ "héllo"[-3:] }}|{{ [1,2,3,4,5][::2] }}|{{ [1,2,3,4,5][-1:0:-2] }})T",
     R"T({})T",
     R"T([1, 2]|cba|[2, 3]|5|é|llo|[1, 3, 5]|[5, 3])T"},
    {R"T({{ "x" * 3 }}|{{ [1] * 3 }}|{{ 1 == 1.0 }}|{{ true == 1 }})T",
     R"T({})T",
     R"T(xxx|[1, 1, 1]|True|True)T"},
    {R"T({{ "a,b,,c".split(",") }}|{{ " a  b ".split() }}|{{ "a b c".split(" ", 1) }}|{{ "a,b,c".rsplit(",", 1) }})T",
     R"T({})T",
     R"T(['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|['a,b', 'c'])T"},
    {R"T({{ {"b":1, "a":2}|tojson }}|{{ [1,2]|tojson(indent=2) }}|{{ "é\n"|tojson }}|{{ 1.0|tojson }})T",
     R"T({})T",
     R"T({"b": 1, "a": 2}|[
  1,
  2
]|"é\n"|1.0)T"},
    {R"T({% macro f() %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{% set a = 1 %}{% for i in [1] %}{% set c = 3 %}{{ f() }}{% endfor %}{% set b = 2 %}{{ f() }})T",
     R"T({})T",
     R"T([1||][1|2|])T"},
    {R"T({% set ns = namespace(v=0) %}{% macro inc() %}{% set ns.v = ns.v + 1 %}{% endmacro %}{{ inc() }}{{ inc() }}{{ ns.v }})T",
     R"T({})T",
     R"T(2)T"},
    {R"T({% for x in [1,2,3] if x > 1 %}{{ loop.index }}/{{ loop.length }}{% else %}E{% endfor %})T",
     R"T({})T",
     R"T(1/22/2)T"},
    {R"T({% for x in [] %}a{% else %}E{% endfor %})T",
     R"T({})T",
     R"T(E)T"},
    {R"T({{ d["items"] }}|{{ d.get("x", 3) }}|{{ d.keys()|list }}|{{ d.get("items") }}|{{ d.get("zz") }})T",
     R"T({"d": {"items": 5}})T",
     R"T(5|3|['items']|5|None)T"},
    {R"T({% for k, v in d.items() %}{{k}}={{v}};{% endfor %}{% for k, v in d|items %}{{k}}={{v}};{% endfor %}{% for k in d %}{{k}}{% endfor %})T",
     R"T({"d": {"b": 1, "a": 2}})T",
     R"T(b=1;a=2;b=1;a=2;ba)T"},
    {R"T({{ [3,1,2]|sort }}|{{ ["b","A","c"]|sort }}|{{ ["b","A","c"]|sort(case_sensitive=true) }}|{{ [3,1,2]|sort(reverse=true) }})T",
     R"T({})T",
     R"T([1, 2, 3]|['A', 'b', 'c']|['A', 'b', 'c']|[3, 2, 1])T"},
    {R"T({{ x + 1 }})T",
     R"T({})T",
     nullptr},
    {R"T({{ "a" + none }})T",
     R"T({})T",
     nullptr},
    {R"T({{ none.x }})T",
     R"T({})T",
     R"T()T"},
    {R"T({{ x.startswith("a") }})T",
     R"T({})T",
     nullptr},
    {R"T({{ "abc".foo }}|{{ [1].append }})T",
     R"T({})T",
     R"T(|)T"},
    {R"T({{ "abc".foo() }})T",
     R"T({})T",
     nullptr},
    {R"T({{ foo(1) }})T",
     R"T({})T",
     nullptr},
    {R"T({{ [1,2] | tojson }}|{{ {"a": [1, {"b": none}]} | tojson }}|{{ "x" | tojson }}|{{ 3 | tojson(indent=2) }})T",
     R"T({})T",
     R"T([1, 2]|{"a": [1, {"b": null}]}|"x"|3)T"},
    {R"T({{ {"a": {}, "b": []} | tojson(indent=2) }}|{{ {"a": [1,2], "b": {"c": "d"}} | tojson(indent=4) }}|{{ {"a": 1} | tojson(separators=[",", ":"]) }}|{{ {"b": 1, "a": 2} | tojson(sort_keys=true) }})T",
     R"T({})T",
     R"T({
  "a": {},
  "b": []
}|{
    "a": [
        1,
        2
    ],
    "b": {
        "c": "d"
    }
}|{"a":1}|{"a": 2, "b": 1})T"},
    {R"T({{ x | tojson }})T",
     R"T({})T",
     nullptr},
    {R"T({{ range(3)|list }}|{{ range(1,7,2)|list }}|{{ range(5,0,-2)|list }}|{{ "  a b  "|trim }}|{{ "xxaxx"|trim("x") }})T",
     R"T({})T",
     R"T([0, 1, 2]|[1, 3, 5]|[5, 3, 1]|a b|a)T"},
    {R"T({{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ "abc"|first }}{{ []|first }}|{{ {"a":1}|first }})T",
     R"T({})T",
     R"T(13a|a)T"},
    {R"T({{ "\u00e9"}}|{{ "a" "b" }}|{{ 1_000 }}|{{ 0x10 }}|{{ 1.5e3 }}|{{ 2e0 }})T",
     R"T({})T",
     R"T(é|ab|1000|16|1500.0|2.0)T"},
    {R"T({{ x|default("d") }}|{{ ""|default("d") }}|{{ ""|default("d", true) }}|{{ none|default("d") }}|{{ false|d("d", boolean=true) }})T",
     R"T({})T",
     R"T(d||d|None|d)T"},
    {R"T({{ ["a","b"]|join(", ") }}|{{ [1,2]|join }}|{{ users|join(",", attribute="name") }}|{{ users|map(attribute="name")|list }}|{{ users|selectattr("admin")|map(attribute="name")|join }}|{{ users|rejectattr("admin")|list|length }})T",
     R"T({"users": [{"name": "a", "admin": true}, {"name": "b", "admin": false}]})T",
     R"T(a, b|12|a,b|['a', 'b']|a|1)T"},
    {R"T({{ users|selectattr("name", "equalto", "b")|list }}|{{ [1,2,3,4]|select("odd")|list }}|{{ [1,2,3,4]|reject("even")|list }}|{{ [1,none,2]|select("none")|list }}|{{ ["a", 1]|select("string")|list }})T",
     R"T({"users": [{"name": "a"}, {"name": "b"}]})T",
     R"T([{'name': 'b'}]|[1, 3]|[1, 3]|[None]|['a'])T"},
    {R"T({{ "Hello World"|lower }}|{{ "hello"|upper }}|{{ "hello world"|title }}|{{ "hELLO"|capitalize }}|{{ 42|string }}|{{ [1]|string }}|{{ -3|abs }}|{{ "3"|int + 1 }}|{{ "2.5"|float }}|{{ 2.7|int }}|{{ "x"|int }}|{{ "x"|int(7) }})T",
     R"T({})T",
     R"T(hello world|HELLO|Hello World|Hello|42|[1]|3|4|2.5|2|0|7)T"},
    {R"T({{ "abc".upper() }}|{{ "ABC".lower() }}|{{ "  x ".strip() }}|{{ "xxhixx".strip("x") }}|{{ "\n\nhi\n".lstrip("\n") }}|{{ "hi\n\n".rstrip() }}|{{ "a-b-c".replace("-", "+") }}|{{ "a-b-c".replace("-", "+", 1) }}|{{ "abc".startswith(("x", "a")) }}|{{ "abc".endswith("bc") }})T",
     R"T({})T",
     R"T(ABC|abc|x|hi|hi
|hi|a+b+c|a+b-c|True|True)T"},
    {R"T({{ "hello".find("l") }}|{{ "hello".rfind("l") }}|{{ "hello".count("l") }}|{{ ",".join(["a","b"]) }}|{{ "a\nb\r\nc".splitlines() }}|{{ "123".isdigit() }}|{{ "abc".isalpha() }}|{{ "Hello".title() }})T",
     R"T({})T",
     R"T(2|3|2|a,b|['a', 'b', 'c']|True|True|Hello)T"},
    {R"T({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t|length }})T",
     R"T({})T",
     R"T(122)T"},
    {R"T({% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }})T",
     R"T({})T",
     R"T([inner 2]ABC)T"},
    {R"T({% filter upper %}hello {{ "world" }}{% endfilter %})T",
     R"T({})T",
     R"T(HELLO WORLD)T"},
    {R"T({% for x in [1,2,3,4,5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %})T",
     R"T({})T",
     R"T(13)T"},
    {R"T({% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}])T",
     R"T({})T",
     R"T(3[])T"},
    {R"T({% for x in "abc" %}{{ loop.index0 }}{{ x }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{% endfor %})T",
     R"T({})T",
     R"T(0a32TrueFalse1b21FalseFalse2c10FalseTrue)T"},
    {R"T({% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle("a","b") }};{% endfor %})T",
     R"T({})T",
     R"T(-2-a;1-3-b;2--a;)T"},
    {R"T({% for a, b in [[1,2],[3,4]] %}{{ a }}{{ b }}{% endfor %})T",
     R"T({})T",
     R"T(1234)T"},
    {R"T({{ 1 if true }}|{{ 1 if false }}|{{ "y" if x is defined else "n" }})T",
     R"T({})T",
     R"T(1||n)T"},
    {R"T({{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ "a" < "b" }}|{{ [1,2] < [1,3] }}|{{ 1 != 2 }}|{{ "a" in "cat" }}|{{ "z" not in "cat" }}|{{ 2 in [1,2] }}|{{ "k" in {"k": 1} }})T",
     R"T({})T",
     R"T(True|False|True|True|True|True|True|True|True)T"},
    {R"T({{ not true }}|{{ not none }}|{{ true and 3 }}|{{ 0 or "x" }}|{{ none or none }}|{{ [] and 1 }})T",
     R"T({})T",
     R"T(False|True|3|x|None|[])T"},
    {R"T({{ -2 ** 2 }}|{{ 2 ** 3 ** 2 }}|{{ 2 ** -1 }}|{{ 7 % -3 }}|{{ -7.5 // 2 }}|{{ 7.5 % 2 }}|{{ 1 / 3 }}|{{ 2 * 3.5 }}|{{ 10 - 2.5 }}|{{ 0.1 + 0.2 }}|{{ 1e100 }}|{{ 123456789012345678 }}|{{ 1.0e-10 }})T",
     R"T({})T",
     R"T(4|64|0.5|-2|-4.0|1.5|0.3333333333333333|7.0|7.5|0.30000000000000004|1e+100|123456789012345678|1e-10)T"},
    {R"T({{ [1, 2] + [3] }}|{{ "a" ~ none ~ 1 ~ [1] }}|{{ "a" ~ undefined_thing ~ "b" }})T",
     R"T({})T",
     R"T([1, 2, 3]|aNone1[1]|ab)T"},
    {R"T({% if x is none %}N{% elif x is string %}S{% elif x is number %}#{% elif x is mapping %}M{% elif x is iterable %}I{% else %}?{% endif %})T",
     R"T({"x": null})T",
     R"T(N)T"},
    {R"T({% if x is none %}N{% elif x is string %}S{% elif x is number %}#{% elif x is mapping %}M{% elif x is iterable %}I{% else %}?{% endif %})T",
     R"T({"x": [1]})T",
     R"T(I)T"},
    {R"T({% if x is none %}N{% elif x is string %}S{% elif x is number %}#{% elif x is mapping %}M{% elif x is iterable %}I{% else %}?{% endif %})T",
     R"T({"x": {"a": 1}})T",
     R"T(M)T"},
    {R"T({{ x is true }}|{{ x is false }}|{{ x is boolean }}|{{ 1 is true }}|{{ x is sameas true }}|{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(2) }}|{{ 1 is integer }}|{{ 1.0 is float }}|{{ "a" is lower }})T",
     R"T({"x": true})T",
     R"T(True|False|True|False|True|True|True|True|False|True|True|True)T"},
    {R"T({{ 1 is eq 1 }}|{{ 2 is gt 1 }}|{{ 2 is ge 3 }}|{{ "a" is in "abc" }}|{{ x is callable }}|{{ range is callable }}|{{ none is none }}|{{ x is not none }})T",
     R"T({"x": 1})T",
     R"T(True|True|False|True|False|True|True|True)T"},
    {R"T({{ raise_exception("boom") }})T",
     R"T({})T",
     nullptr},
    {R"T({{ "abc"[5] }}|{{ [1][3] }}|{{ d.missing }}|{{ d["missing"] }})T",
     R"T({"d": {}})T",
     R"T(|||)T"},
    {R"T({{ "xyz"|reverse }}|{{ [1,2,3]|reverse|list }}|{{ [1,2,2,"a","A"]|unique|list }}|{{ [1,5,3]|max }}|{{ [4,2,8]|min }}|{{ [1,2,3]|sum }}|{{ users|sum(attribute="n") }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 3.14159|round(2) }}|{{ 3.1|round(method="ceil") }})T",
     R"T({"users": [{"n": 1}, {"n": 2}]})T",
     R"T(zyx|[3, 2, 1]|[1, 2, 'a']|5|2|6|3|2.0|4.0|3.14|4.0)T"},
    {R"T({{ "a\nb\n\nc"|indent(2) }}|{{ "a\nb"|indent(2, true) }}|{{ "a\n\nb"|indent(2, blank=true) }})T",
     R"T({})T",
     R"T(a
  b

  c|  a
  b|a
  
  b)T"},
    {R"T({{ {"b": 2, "a": 1}|dictsort }}|{{ "<a&b>"|e }}|{{ "x"|safe }}|{{ users[0]|attr("n") }})T",
     R"T({"users": [{"n": 1}]})T",
     R"T([('a', 1), ('b', 2)]|&lt;a&amp;b&gt;|x|)T"},
    {R"T({{ x.0 }}|{{ x[0:2] }}|{{ x[-1] }})T",
     R"T({"x": [10, 20, 30]})T",
     R"T(10|[10, 20]|30)T"},
    {R"T({{ "é"|tojson }}|{{ "\u0001\"\\"|tojson }}|{{ 1e20|tojson }}|{{ -0.0|tojson }}|{{ [true, false, none]|tojson }})T",
     R"T({})T",
     R"T("é"|"\u0001\"\\"|1e+20|-0.0|[true, false, null])T"},
    {R"T({%- set content = "<think>\nabc\n</think>\n\nanswer" %}{{ content.split("</think>")[-1].lstrip("\n") }}|{{ content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n") }})T",
     R"T({})T",
     R"T(answer|abc)T"},
    {R"T({{ "{{" }}|{{ "}}" }}|{{ {"a": {"b": 1}} }}|{{ "%}" }})T",
     R"T({})T",
     R"T({{|}}|{'a': {'b': 1}}|%})T"},
    {R"T({% raw %}{{ not a var }}{% endraw %}|{%- raw -%}  {% x %}  {%- endraw %}|)T",
     R"T({})T",
     R"T({{ not a var }}|{% x %}|)T"},
    {R"T(  {%- if true -%}  
  x  
  {%- endif -%}  
 y)T",
     R"T({})T",
     R"T(xy)T"},
    {R"T(a
  {%+ if true %}b{% endif %}
  {% if true +%}
c{% endif %})T",
     R"T({})T",
     R"T(a
  b
c)T"},
    {R"T({{ "a" }}
{{ "b" }}
  {{ "c" }}  
)T",
     R"T({})T",
     R"T(a
b
  c  )T"},
    {"line\r\nnext\r\n{% if true %}\r\nx\r\n{% endif %}\r\n",
     R"T({})T",
     R"T(line
next
x
)T"},
    {R"T({# comment #}
{#- c2 -#}  
  x  {#+ c3 #}
y)T",
     R"T({})T",
     R"T(x  y)T"},
    {R"T({% if true %}
  {% for i in [1,2] %}
    {{ i }}
  {% endfor %}
{% endif %}
)T",
     R"T({})T",
     R"T(    1
    2
)T"},
    {R"T({{ x[1:] }}|{{ x[:-1] }}|{{ x[::] }})T",
     R"T({"x": "héllo wörld"})T",
     R"T(éllo wörld|héllo wörl|héllo wörld)T"},
    {R"T({{ dict(a=1, b="x") }}|{{ namespace(a=1).a }}|{{ ns }})T",
     R"T({})T",
     R"T({'a': 1, 'b': 'x'}|1|)T"},
    {R"T({% set ns = namespace(items=[]) %}{% for i in range(3) %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.items }})T",
     R"T({})T",
     R"T([0, 1, 2])T"},
    {R"T({% macro m(x) %}<{{ x }}>{% endmacro %}{{ m("a") ~ m("b") }}|{{ m("c")|trim }}|{{ m("d")|length }})T",
     R"T({})T",
     R"T(<a><b>|<c>|3)T"},
    {R"T({% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(5) }})T",
     R"T({})T",
     R"T(54321)T"},
    {R"T({{ m.content }})T",
     R"T({"m": {"content": null}})T",
     R"T(None)T"},
    {R"T({{ 5 / 0 }})T",
     R"T({})T",
     nullptr},
    {R"T({{ x | foo }})T",
     R"T({})T",
     nullptr},
    {R"T({% if x is foo %}{% endif %})T",
     R"T({})T",
     nullptr},
    {R"T({% for %})T",
     R"T({})T",
     nullptr},
    {R"T({% if true %}no end)T",
     R"T({})T",
     nullptr},
    {R"T({{ x })T",
     R"T({})T",
     nullptr},
    {R"T({% endif %})T",
     R"T({})T",
     nullptr},
    {R"T({% set x = 1 %}{{ x.y.z }})T",
     R"T({})T",
     nullptr},
    {R"T({{ 1 +  }})T",
     R"T({})T",
     nullptr},
    {R"T({% include "x" %})T",
     R"T({})T",
     nullptr},
    {R"T({{ "abc" | length }}{{ {"a": 1} | length }}{{ x | length }})T",
     R"T({})T",
     R"T(310)T"},
    {R"T({{ 3 | length }})T",
     R"T({})T",
     nullptr},
    {R"T({% for x in 3 %}{% endfor %})T",
     R"T({})T",
     nullptr},
    {R"T({% for x in none %}{% endfor %})T",
     R"T({})T",
     nullptr},
    {R"T({% set x.y = 1 %})T",
     R"T({"x": {}})T",
     nullptr},
    {R"T({{ "a".split("") }})T",
     R"T({})T",
     nullptr},
    {R"T({{ ns.v }}{% set ns = namespace() %}{{ ns.v }}|{{ ns.v is defined }})T",
     R"T({})T",
     nullptr},
    {R"T({{ [1,2,3] | first | string }}|{{ 1 | tojson | safe }})T",
     R"T({})T",
     R"T(1|1)T"},
    {R"T({{ "a" if x else "b" }}{{ "c" if not x }})T",
     R"T({"x": []})T",
     R"T(bc)T"},
    {R"T({{ -x|abs }}|{{ -1|abs }})T",
     R"T({"x": 3})T",
     R"T(3|1)T"},
    {R"T({{ 7 // 2 * 2 }}|{{ 2 + 3 * 4 }}|{{ (2 + 3) * 4 }}|{{ 2 * 3 ~ 4 }}|{{ 1 ~ 2 + 3 }})T",
     R"T({})T",
     nullptr},
    {R"T({% if true %}  
x{% endif %})T",
     R"T({})T",
     R"T(  
x)T"},
    {R"T({% if true %}

x{% endif %})T",
     R"T({})T",
     R"T(
x)T"},
    {R"T(  {% if true %}
x
  {% endif %}  y)T",
     R"T({})T",
     R"T(x
  y)T"},
    {R"T(x  {% if true %}y{% endif %})T",
     R"T({})T",
     R"T(x  y)T"},
    {R"T(	 {% if true %}y{% endif %})T",
     R"T({})T",
     R"T(y)T"},
    {R"T({{ 1 }}  {% if true %}y{% endif %})T",
     R"T({})T",
     R"T(1  y)T"},
    {R"T({{ 1 }}
  {% if true %}y{% endif %})T",
     R"T({})T",
     R"T(1
y)T"},
    {R"T({% if true -%}

  x  {%- endif %}|)T",
     R"T({})T",
     R"T(x|)T"},
    {R"T({%- if true %}a{% endif -%}

  b)T",
     R"T({})T",
     R"T(ab)T"},
    {R"T(a {{- 1 -}} b)T",
     R"T({})T",
     R"T(a1b)T"},
    {R"T(a {{+ 1 }} b)T",
     R"T({})T",
     R"T(a 1 b)T"},
    {R"T({% for i in [1,2] %}
  {{ i }}
{% endfor %}
)T",
     R"T({})T",
     R"T(  1
  2
)T"},
    {R"T({% for i in [1,2] -%}
  {{ i }}
{%- endfor %})T",
     R"T({})T",
     R"T(12)T"},
    {R"T({# a #}{# b -#}
  c)T",
     R"T({})T",
     R"T(c)T"},
    {R"T(x
{# only #}
y)T",
     R"T({})T",
     R"T(x
y)T"},
    {R"T(x
  {#- only #}
y)T",
     R"T({})T",
     R"T(xy)T"},
    {R"T({% raw %}
  {% if %}
{% endraw %}
z)T",
     R"T({})T",
     R"T(
  {% if %}
z)T"},
    {R"T(  {% raw %}a{% endraw %}  )T",
     R"T({})T",
     R"T(a  )T"},
    {R"T(trailing

)T",
     R"T({})T",
     R"T(trailing
)T"},
    {R"T(trailing
)T",
     R"T({})T",
     R"T(trailing)T"},
    {R"T(
)T",
     R"T({})T",
     R"T()T"},
    {R"T()T",
     R"T({})T",
     R"T()T"},
    {R"T({{ "a
b" }})T",
     R"T({})T",
     R"T(a
b)T"},
    {R"T({% set x = [1, 2, 3,] %}{{ x }}{% set d = {"a": 1,} %}{{ d }})T",
     R"T({})T",
     R"T([1, 2, 3]{'a': 1})T"},
    {R"T({{ (1) }}|{{ (1,) }}|{{ () }})T",
     R"T({})T",
     R"T(1|(1,)|())T"},
    {R"T({% macro m(a) %}{{ caller() }}{% endmacro %}{% call m(1) %}x{% endcall %})T",
     R"T({})T",
     R"T(x)T"},
    {R"T({% set x = 5 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 6 %}{{ m() }})T",
     R"T({})T",
     R"T(6)T"},
    {R"T({% for i in [1] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %})T",
     R"T({})T",
     R"T(1)T"},
    {R"T({% macro outer() %}{% macro inner() %}in{% endmacro %}{{ inner() }}{% endmacro %}{{ outer() }})T",
     R"T({})T",
     R"T(in)T"},
    {R"T({% set ns = namespace(a=1, b=[1]) %}{% set ns.c = ns.a + 1 %}{{ ns.c }}{{ ns.b }})T",
     R"T({})T",
     R"T(2[1])T"},
    {R"T({% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{% endfor %}{{ loop.index }}{% endfor %})T",
     R"T({})T",
     R"T(102011121212223)T"},
    {R"T({% for m in msgs %}{{ m.role }}:{{ m["content"] }};{% endfor %})T",
     R"T({"msgs": [{"role": "u", "content": "hi"}, {"role": "a", "content": null}]})T",
     R"T(u:hi;a:None;)T"},
    {R"T({{ msgs[0].get("content") }}|{{ msgs[1].get("missing", "dflt") }}|{{ msgs[1].content is none }})T",
     R"T({"msgs": [{"role": "u", "content": "hi"}, {"role": "a", "content": null}]})T",
     R"T(hi|dflt|True)T"},
    {R"T({{ x | tojson }})T",
     R"T({"x": {"z": 1, "a": [1, 2.5, "ü \u0000"], "m": {}}})T",
     R"T({"z": 1, "a": [1, 2.5, "ü \u0000"], "m": {}})T"},
    {R"T({{ x | tojson(indent=2) }})T",
     R"T({"x": {"z": 1, "a": [1, 2.5, {"q": []}], "m": {}}})T",
     R"T({
  "z": 1,
  "a": [
    1,
    2.5,
    {
      "q": []
    }
  ],
  "m": {}
})T"},
    {R"T({{ x | tojson(indent="	") }})T",
     R"T({"x": [1, {"a": 1}]})T",
     R"T([
	1,
	{
		"a": 1
	}
])T"},
    {R"T({{ x }})T",
     R"T({"x": {"z": 1, "a": [1, 2.5, "it's", "say \"hi\"", "both ' \""], "m": null, "t": true}})T",
     R"T({'z': 1, 'a': [1, 2.5, "it's", 'say "hi"', 'both \' "'], 'm': None, 't': True})T"},
    {R"T({{ x }}|{{ x + 1 }})T",
     R"T({"x": 1.0})T",
     R"T(1.0|2.0)T"},
    {R"T({{ 1e22 }}|{{ 1e15 }}|{{ 1e16 }}|{{ 123456789.123 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 5e-324 }}|{{ 1.7976931348623157e308 }}|{{ -2.5e-7 }})T",
     R"T({})T",
     R"T(1e+22|1000000000000000.0|1e+16|123456789.123|0.0001|1e-05|5e-324|1.7976931348623157e+308|-2.5e-07)T"},
    {R"T({{ "abc" < "abd" }}|{{ [1] == [1.0] }}|{{ {"a": 1} == {"a": 1} }}|{{ none == none }}|{{ x == y }})T",
     R"T({})T",
     R"T(True|True|True|True|True)T"},
    {R"T({{ 1 < "a" }})T",
     R"T({})T",
     nullptr},
    {R"T({{ [1] + "a" }})T",
     R"T({})T",
     nullptr},
    {R"T({{ -"a" }})T",
     R"T({})T",
     nullptr},
    {R"T({{ "a" * "b" }})T",
     R"T({})T",
     nullptr},
    {R"T({{ x() }})T",
     R"T({"x": 1})T",
     nullptr},
    {R"T({{ "abc".startswith() }})T",
     R"T({})T",
     nullptr},
    {R"T({{ "abc"|join(1, 2, 3) }})T",
     R"T({})T",
     nullptr},
    {R"T({% set x.y = 1 %})T",
     R"T({})T",
     nullptr},
    {R"T({{ loop.index }})T",
     R"T({})T",
     nullptr},
    {R"T({% break %})T",
     R"T({})T",
     nullptr},
    {R"T({% for x in [1] %}{% macro m() %}{% break %}{% endmacro %}{% endfor %})T",
     R"T({})T",
     nullptr},
    {R"T({{ "a" "b" }}{{ "c" ~ "d" }})T",
     R"T({})T",
     R"T(abcd)T"},
    {R"T({{ not x is defined }}|{{ x is not defined }}|{{ not (x is defined) }})T",
     R"T({})T",
     R"T(True|True|True)T"},
    {R"T({{ 1 if 0 else 2 if 0 else 3 }})T",
     R"T({})T",
     R"T(3)T"},
    {R"T({{ [1, 2][0] + [3][0] }}|{{ {"a": {"b": [5]}}.a.b[0] }}|{{ {"a": 1}["a"] }})T",
     R"T({})T",
     R"T(4|5|1)T"},
    {R"T({{ messages }}|{{ tools }}|{{ add_generation_prompt }}|{{ bos_token }}|{{ eos_token }})T",
     R"T({})T",
     R"T([]|None|True||)T"},
    {R"T({{ "%}" }}{{ "#}" }}{{ "{#" }})T",
     R"T({})T",
     R"T(%}#}{#)T"},
    {R"T({{ "abc" | replace("b", "x") | upper | trim }})T",
     R"T({})T",
     R"T(AXC)T"},
    {R"T({% if a is defined and a.b is defined %}y{% else %}n{% endif %})T",
     R"T({})T",
     R"T(n)T"},
    {R"T({% if a is defined and a.b is defined %}y{% else %}n{% endif %})T",
     R"T({"a": {}})T",
     R"T(n)T"},
    {R"T({{ content.split()|length }})T",
     R"T({"content": "a b　c d"})T",
     R"T(4)T"},
    {R"T({{ "  　x  "|trim }}|{{ " x ".strip() }})T",
     R"T({})T",
     R"T(x|x)T"},
    {R"T({{ x|string|length }})T",
     R"T({"x": [1, "é"]})T",
     R"T(8)T"},
    {R"T({{ [1,2,3]|map("string")|join("-") }}|{{ ["a","b"]|map("upper")|list }})T",
     R"T({})T",
     R"T(1-2-3|['A', 'B'])T"},
    {R"T({{ [{"a": {"b": 1}}, {"a": {"b": 2}}]|map(attribute="a.b")|list }}|{{ [[1],[2]]|map(attribute="0")|list }})T",
     R"T({})T",
     R"T([1, 2]|[1, 2])T"},
    {R"T({{ [1,2,3]|selectattr("x")|list }})T",
     R"T({})T",
     R"T([])T"},
    {R"T({% set d = {"k": "v"} %}{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}{{ d.values()|list }})T",
     R"T({})T",
     R"T(kv['v'])T"},
    {R"T({% for i in range(1, 10, 3) %}{{ i }}{% endfor %})T",
     R"T({})T",
     R"T(147)T"},
    {R"T({{ "a,b".split(",", maxsplit=0) }}|{{ "  a b  ".split(None, 1) }})T",
     R"T({})T",
     R"T(['a,b']|['a', 'b  '])T"},
    {R"T({{ s.strip() }}|{{ s.rstrip("é ") }}|{{ s[-1] }}|{{ s[1] }}|{{ s[-9] }}|{{ s.lstrip() }}|{{ s|trim }})T",
     R"T({"s": " 　aé  "})T",
     R"T(aé| 　aé | |　||aé  |aé)T"},
    {R"T({{ 3 // 0 }})T",
     R"T({})T",
     nullptr},
    {R"T({{ 10 % 0 }})T",
     R"T({})T",
     nullptr}
};

TEST(ChatTemplateFeatures, MatchJinja2) {
  for (const FeatureCase& c : kFeatureCases) {
    SCOPED_TRACE(c.source);
    const Json context = Json::parse(c.context);
    if (c.expected != nullptr) {
      try {
        EXPECT_EQ(render(c.source, context), c.expected);
      } catch (const agentkv::Error& e) {
        ADD_FAILURE() << "unexpected error: " << e.what();
      }
    } else {
      EXPECT_THROW(render(c.source, context), agentkv::Error);
    }
  }
}

TEST(ChatTemplateFeatures, ContextVariables) {
  ChatTemplateInputs inputs;
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.add_generation_prompt = false;
  inputs.extra_context = Json::parse(R"({"enable_thinking": false, "messages": "ignored"})");
  EXPECT_EQ(ChatTemplate("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ enable_thinking }}|"
                         "{{ messages }}|{{ tools }}|{{ tools is none }}")
                .render(inputs),
            "<s>|</s>|False|False|[]|None|True");
}

// ---- gpt-oss (harmony) ---------------------------------------------------------------------------
// The template of ../shared/fixtures/templates/openai-gpt-oss-120b.jinja. The expected prompts are
// written from what the template says (not recorded from Python): a system message of its own,
// the client's system / developer message and the tools (a TypeScript-like namespace) in a
// developer message, earlier reasoning dropped except before a call no final answer follows yet,
// calls `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>`,
// results `<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>"RESULT"<|end|>`.

const std::string& gpt_oss_template() {
  static const std::string source = read_file(std::string(AGENTKV_FIXTURES_DIR) + "/templates/openai-gpt-oss-120b.jinja");
  return source;
}

std::string gpt_oss_system(bool tools) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(date, sizeof date, "%Y-%m-%d", &local);
  return std::string("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
                     "Knowledge cutoff: 2024-06\nCurrent date: ") +
         date + "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message." +
         (tools ? "\nCalls to these tools must go to the commentary channel: 'functions'." : "") + "<|end|>";
}

std::string render_gpt_oss(const Json& messages, const Json& tools = Json(), bool add_generation_prompt = true) {
  ChatTemplateInputs in;
  in.messages = messages;
  in.tools = tools;
  in.add_generation_prompt = add_generation_prompt;
  return ChatTemplate(gpt_oss_template()).render(in);
}

const char* const kGptOssTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {
      "location": {"type": "string", "description": "City"},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer", "default": 1},
      "tags": {"type": "array", "items": {"type": "string"}},
      "flags": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}},
    "required": ["location"]}}},
  {"type": "function", "function": {"name": "now", "description": "The time", "parameters": {"type": "object", "properties": {}}}}])";

TEST(GptOssTemplate, PlainChatAndGenerationPrompt) {
  AGENTKV_NEEDS_FIXTURES();
  EXPECT_EQ(render_gpt_oss(Json::parse(R"([{"role": "user", "content": "Hi"}])")),
            gpt_oss_system(false) + "<|start|>user<|message|>Hi<|end|><|start|>assistant");
  EXPECT_EQ(render_gpt_oss(Json::parse(R"([{"role": "user", "content": "Hi"}])"), Json(), false),
            gpt_oss_system(false) + "<|start|>user<|message|>Hi<|end|>");
  // A system (or developer) message becomes the developer message's instructions.
  for (const char* role : {"system", "developer"})
    EXPECT_EQ(render_gpt_oss(Json::parse(std::string(R"([{"role": ")") + role +
                                         R"(", "content": "Be brief."}, {"role": "user", "content": "Hi"}])")),
              gpt_oss_system(false) + "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
                                      "<|start|>user<|message|>Hi<|end|><|start|>assistant")
        << role;
}

TEST(GptOssTemplate, ToolsBecomeATypeScriptNamespace) {
  AGENTKV_NEEDS_FIXTURES();
  EXPECT_EQ(render_gpt_oss(Json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])"),
                           Json::parse(kGptOssTools)),
            gpt_oss_system(true) +
                "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n"
                "// Current weather\ntype get_weather = (_: {\n// City\nlocation: string,\n"
                "unit?: \"celsius\" | \"fahrenheit\",\ndays?: number, // default: 1,\ntags?: string[],\n"
                // A nested property's type follows a `{{ }}` without `-`: the template's own newline
                // and indentation stay (jinja2 trims only around block tags).
                "flags?: {\na: \n                boolean},\n}) => any;\n\n"
                "// The time\ntype now = () => any;\n\n} // namespace functions<|end|>"
                "<|start|>user<|message|>Hi<|end|><|start|>assistant");
}

TEST(GptOssTemplate, CallsResultsAndWhichReasoningStays) {
  AGENTKV_NEEDS_FIXTURES();
  const std::string call =
      R"(<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Paris"}<|call|>)";
  const std::string result = R"(<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|>)";
  const std::string head = gpt_oss_system(false) + "<|start|>user<|message|>Weather in Paris?<|end|>";
  Json turn = Json::parse(R"([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "thinking": "Need the weather.", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"location": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  // The agent's next turn: the reasoning before the call stays (no final answer follows it yet).
  EXPECT_EQ(render_gpt_oss(turn),
            head + "<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>" + call + result + "<|start|>assistant");
  // Reasoning given as content (no thinking) is rendered the same way.
  Json as_content = turn;
  as_content[1].erase("thinking");
  as_content[1]["content"] = "Need the weather.";
  EXPECT_EQ(render_gpt_oss(as_content), render_gpt_oss(turn));
  // Once a final answer follows, earlier reasoning is dropped, the answer's too.
  turn.push_back(Json::parse(R"({"role": "assistant", "thinking": "Say it.", "content": "It is sunny."})"));
  turn.push_back(Json::parse(R"({"role": "user", "content": "Thanks"})"));
  EXPECT_EQ(render_gpt_oss(turn), head + call + result +
                                      "<|start|>assistant<|channel|>final<|message|>It is sunny.<|end|>"
                                      "<|start|>user<|message|>Thanks<|end|><|start|>assistant");
  // A last assistant turn without the generation prompt (training): its reasoning and <|return|>.
  turn.erase(turn.size() - 1);
  EXPECT_EQ(render_gpt_oss(turn, Json(), false),
            head + call + result +
                "<|start|>assistant<|channel|>analysis<|message|>Say it.<|end|>"
                "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>");
}

TEST(GptOssTemplate, RefusesWhatItCannotRender) {
  AGENTKV_NEEDS_FIXTURES();
  EXPECT_THROW(render_gpt_oss(Json::parse(R"([{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}])")),
               agentkv::Error);
  EXPECT_THROW(render_gpt_oss(Json::parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "<|channel|>analysis<|message|>x"}, {"role": "user", "content": "Hi"}])")),
               agentkv::Error);
  EXPECT_THROW(render_gpt_oss(Json::parse(R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "a",
      "thinking": "b", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}])")),
               agentkv::Error);
}

// ---- errors -----------------------------------------------------------------------------------

TEST(ChatTemplateErrors, SyntaxErrorNamesLineAndColumn) {
  const std::string message = render_error("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}");
  EXPECT_NE(message.find("syntax error at line 3, column 8"), std::string::npos) << message;
}

TEST(ChatTemplateErrors, UnknownFilterAndTestAreRejectedAtParse) {
  try {
    ChatTemplate tmpl("{{ x | frobnicate }}");
    FAIL() << "parsed";
  } catch (const agentkv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 1, column 8: no filter named 'frobnicate'"), std::string::npos)
        << e.what();
  }
  EXPECT_NE(render_error("\n{% if x is frob %}{% endif %}").find("line 2, column 12: no test named 'frob'"),
            std::string::npos);
}

TEST(ChatTemplateErrors, MalformedTags) {
  const struct {
    const char* source;
    const char* message;
  } cases[] = {
      {"{% if true %}open", "line 1, column 18: unexpected end of template, expected 'elif' or 'else' or 'endif'"},
      {"a {{ x", "line 1, column 3: unterminated '{{'"},
      {"{# never closed", "line 1, column 1: unterminated comment"},
      {"{{ 'abc }}", "line 1, column 4: unterminated string literal"},
      {"{% frobnicate %}", "unknown tag 'frobnicate'"},
      {"{% include 'x.j2' %}", "the 'include' tag is not supported"},
      {"{% endfor %}", "unexpected 'endfor'"},
      {"{% break %}", "'break' outside of a loop"},
      {"{{ (1 + 2 }}", "unexpected '}'"},
      {"{{ 1 ! 2 }}", "unexpected character '!'"},
  };
  for (const auto& c : cases) {
    const std::string message = render_error(c.source);
    EXPECT_NE(message.find(c.message), std::string::npos) << c.source << " -> " << message;
  }
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheExpression) {
  EXPECT_NE(render_error("a\n  {{ foo.bar }}").find("line 2, column 6: 'foo' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ raise_exception('Bad roles') }}").find("Bad roles"), std::string::npos);
  EXPECT_NE(render_error("{{ 'a' + 1 }}").find("unsupported operand types for +: 'str' and 'int'"),
            std::string::npos);
  EXPECT_NE(render_error("{{ {} | tojson(foo=1) }}").find("unexpected keyword argument 'foo'"), std::string::npos);
}

// ---- robustness: untrusted templates ------------------------------------------------------------

// Renders and reports whether it succeeded; anything but agentkv::Error fails the test.
bool survives(const std::string& source, const ChatTemplateInputs& inputs) {
  try {
    ChatTemplate(source).render(inputs);
    return true;
  } catch (const agentkv::Error&) {
    return false;
  }
}

ChatTemplateInputs sample_conversation() {
  ChatTemplateInputs inputs;
  inputs.messages = Json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "<think>r</think>a", "tool_calls": [{"function": {"name": "f", "arguments": {"x": [1]}}}]},
    {"role": "tool", "content": "out"}])");
  inputs.tools = Json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  return inputs;
}

TEST(ChatTemplateRobustness, MutatedTemplatesNeverCrash) {
  AGENTKV_NEEDS_FIXTURES();
  const std::string bases[] = {qwen3_template(), kQwen35Template};
  const char* fragments[] = {"{%", "%}", "{{", "}}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"", "|", ".",
                             "endif", "endfor", "for x in", "if", "else", "loop", "[::-1]", "ns", "~", "*",
                             "macro", "set", "=", ",", "is", "not", "\\", "{% raw %}", "9999999999999999999"};
  std::mt19937 rng(1234);
  const ChatTemplateInputs inputs = sample_conversation();
  int rendered = 0;
  for (int i = 0; i < 600; ++i) {
    std::string s = bases[i % 2];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (s.size() + 1);
      switch (rng() % 3) {
        case 0: s.erase(at, rng() % 40); break;
        case 1: s.insert(at, fragments[rng() % std::size(fragments)]); break;
        default: {
          const size_t from = rng() % (s.size() + 1);
          s.insert(at, s.substr(from, rng() % 60));
        }
      }
    }
    rendered += survives(s, inputs) ? 1 : 0;
  }
  EXPECT_GT(rendered, 0);  // some mutations are harmless and must still render
}

TEST(ChatTemplateRobustness, RandomInputNeverCrashes) {
  const std::string alphabet = "{}%#-+()[]'\"|.:,=~*/ \nabxifornotsetloop0123";
  std::mt19937 rng(99);
  const ChatTemplateInputs inputs = sample_conversation();
  for (int i = 0; i < 1500; ++i) {
    std::string s;
    const size_t n = rng() % 60;
    for (size_t j = 0; j < n; ++j) s.push_back(alphabet[rng() % alphabet.size()]);
    survives("{{" + s, inputs);
    survives("{%" + s, inputs);
    survives(s, inputs);
  }
}

TEST(ChatTemplateRobustness, ResourceLimits) {
  AGENTKV_NEEDS_FIXTURES();
  const ChatTemplateInputs inputs;
  const auto started = std::chrono::steady_clock::now();
  const char* bombs[] = {
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ loop.index }}{% endfor %}{% endfor %}",
      "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
      "{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}",
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
      "{{ 'x' * 100000000000 }}",
      "{{ [1] * 100000000 }}",
      "{{ range(1000000000)|length }}",
      "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}",
      "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",
      "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
      "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}",
      // 64-bit integers (Python's are unbounded): overflow is an error, never wraps.
      "{{ 9223372036854775807 + 1 }}",
      "{{ (2 ** 62) * 4 }}",
  };
  for (const char* bomb : bombs) EXPECT_FALSE(survives(bomb, inputs)) << bomb;
  // Linear work repeated in a loop is charged by the size it walks.
  const char* scans[] = {
      "{% set s = 'é' * 5000000 %}{% for i in range(100000) %}{{ s[-1] }}{% endfor %}",
      "{% set s = 'x' * 5000000 %}{% for i in range(100000) %}{{ s|length }}{% endfor %}",
      "{% set s = 'x' * 5000000 %}{% for i in range(100000) %}{{ 'y' in s }}{% endfor %}",
      "{% set l = range(1000000)|list %}{% for i in range(100000) %}{{ -1 in l }}{% endfor %}",
      "{% set l = range(1000000)|list %}{% for i in range(100000) %}{% for x in l %}{% break %}{% endfor %}{% endfor %}",
      "{% set l = range(100000)|list %}{{ l|unique|list|length }}",
  };
  for (const char* scan : scans) EXPECT_FALSE(survives(scan, inputs)) << scan;
  // Nesting the parser must refuse instead of recursing without bound.
  EXPECT_FALSE(survives("{{ " + std::string(20000, '(') + "1" + std::string(20000, ')') + " }}", inputs));
  EXPECT_FALSE(survives("{{ " + std::string(20000, '[') + std::string(20000, ']') + " }}", inputs));
  std::string chain = "{{ 1";
  for (int i = 0; i < 50000; ++i) chain += " + 1";
  EXPECT_FALSE(survives(chain + " }}", inputs));
  std::string nots = "{{ ";
  for (int i = 0; i < 50000; ++i) nots += "not ";
  EXPECT_FALSE(survives(nots + "1 }}", inputs));
  std::string filters = "{{ 'a'";
  for (int i = 0; i < 50000; ++i) filters += "|trim";
  EXPECT_FALSE(survives(filters + " }}", inputs));
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_FALSE(survives(blocks, inputs));
  // Deeply nested input JSON is refused too.
  ChatTemplateInputs deep;
  Json nested = Json::array();
  for (int i = 0; i < 2000; ++i) nested = Json::array({nested});
  deep.extra_context["deep"] = nested;
  EXPECT_FALSE(survives("{{ deep }}", deep));
  // Large client JSON stays fast: lookups in big dicts and a big extra context are indexed.
  ChatTemplateInputs wide = sample_conversation();
  Json arguments = Json::object();
  for (int i = 0; i < 5000; ++i) arguments["arg" + std::to_string(i)] = i;
  wide.messages[2]["tool_calls"][0]["function"]["arguments"] = arguments;
  for (int i = 0; i < 5000; ++i) wide.extra_context["var" + std::to_string(i)] = i;
  const std::string wide_prompt = ChatTemplate(kQwen35Template).render(wide);
  EXPECT_NE(wide_prompt.find("<parameter=arg4999>\n4999\n</parameter>"), std::string::npos);
  EXPECT_EQ(ChatTemplate("{{ var4999 }}").render(wide), "4999");
  // A realistic template stays far below the limits: 2000 messages.
  ChatTemplateInputs big;
  for (int i = 0; i < 1000; ++i) {
    big.messages.push_back({{"role", "user"}, {"content", "question " + std::to_string(i)}});
    big.messages.push_back({{"role", "assistant"}, {"content", "<think>\nr\n</think>\n\nanswer"}});
  }
  EXPECT_TRUE(survives(qwen3_template(), big));
  EXPECT_TRUE(survives(kQwen35Template, big));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_LT(seconds, 20.0);
}

}  // namespace
