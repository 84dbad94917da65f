// The Llama 3.x, Mistral and gpt-oss (harmony) tool-call formats (src/server/tool_format_*.cpp), and the Qwen ones
// beside them: recorded outputs of each (tests/data/tool_call_outputs.json: well-formed and
// malformed) parse to the message they
// should; every prefix of each parses to a message that only grows and ends as the whole text's
// parse (the streaming diff relies on it); the tool grammar compiles, accepts the well-formed
// outputs and refuses the malformed ones; each template of ../shared/fixtures/templates maps to its
// format, and renders a call in the form its format's parser reads back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "agentkv/chat_template.h"
#include "agentkv/error.h"
#include "agentkv/gbnf.h"
#include "agentkv/grammar_matcher.h"
#include "fixtures.h"
#include "agentkv/tokenizer.h"
#include "server/chat_formatter.h"
#include "server/grammar_run.h"
#include "server/tool_calls.h"

namespace {

using namespace agentkv::server;
using Json = nlohmann::ordered_json;

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json recorded_cases() {
  const Json cases =
      Json::parse(read_text(std::filesystem::path(AGENTKV_SOURCE_DIR) / "tests/data/tool_call_outputs.json"))["cases"];
  EXPECT_GE(cases.size(), 50u);  // the file was read
  return cases;
}

Json request_tools(bool with_code_tool = true) {
  Json tools = Json::parse(R"([
    {"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":{"type":"object","properties":{
      "location":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["location"]}}},
    {"type":"function","function":{"name":"read_file","description":"Reads a file","parameters":{"type":"object","properties":{"path":{"type":"string"}},
      "required":["path"]}}},
    {"type":"function","function":{"name":"write_file","description":"Writes a file","parameters":{"type":"object","properties":{"path":{"type":"string"},
      "content":{"type":"string"}},"required":["path","content"]}}}])");
  if (with_code_tool)
    tools.push_back(Json::parse(R"({"type":"function","function":{"name":"python","description":"Runs code","parameters":{"type":"object",
      "properties":{"code":{"type":"string"}},"required":["code"]}}})"));
  return tools;
}

ToolFormat format_named(const std::string& name) {
  for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::QwenXml, ToolFormat::Llama3Json, ToolFormat::MistralNemo,
                       ToolFormat::MistralArgs, ToolFormat::MistralCallId, ToolFormat::Harmony})
    if (name == tool_format_name(f)) return f;
  ADD_FAILURE() << "no format " << name;
  return ToolFormat::Hermes;
}

ChatParseOptions options_for(const Json& c) {
  ChatParseOptions o;
  o.format = format_named(c["format"]);
  o.parse_tools = true;
  o.tools = request_tools(c.value("tools", "") != "no-code");
  return o;
}

bool is_prefix(const std::string& a, const std::string& b) { return b.compare(0, a.size(), a) == 0; }

bool mistral(ToolFormat f) {
  return f == ToolFormat::MistralNemo || f == ToolFormat::MistralArgs || f == ToolFormat::MistralCallId;
}

TEST(ToolFormats, RecordedOutputsParse) {
  for (const Json& c : recorded_cases()) {
    const std::string what = c["format"].get<std::string>() + ": " + c["name"].get<std::string>();
    const ChatParseOptions o = options_for(c);
    const ChatMessage m = parse_chat_output(c["text"].get<std::string>(), o, false);
    EXPECT_EQ(m.content, c["content"]) << what;
    EXPECT_EQ(m.reasoning, c["reasoning"]) << what;
    ASSERT_EQ(m.tool_calls.size(), c["tool_calls"].size()) << what;
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
      const Json& want = c["tool_calls"][i];
      EXPECT_EQ(m.tool_calls[i].name, want["name"]) << what;
      EXPECT_EQ(m.tool_calls[i].arguments, want["arguments"]) << what;
      EXPECT_TRUE(Json::accept(m.tool_calls[i].arguments)) << what;
      if (want.contains("id")) {
        EXPECT_EQ(m.tool_calls[i].id, want["id"]) << what;  // the model's own id is kept
      } else if (mistral(o.format)) {
        EXPECT_TRUE(is_mistral_tool_call_id(m.tool_calls[i].id)) << what << ": " << m.tool_calls[i].id;
      } else {
        EXPECT_EQ(m.tool_calls[i].id.rfind("call_", 0), 0u) << what;
      }
    }
  }
}

// Every prefix, as the server parses it while streaming: what it shows only grows (content,
// reasoning, each call's arguments; calls keep their names and order), stays a prefix of the
// whole text's parse, and the deltas of ChatStreamDiff add up to that parse.
TEST(ToolFormats, EveryPrefixGrowsIntoTheFinalParse) {
  for (const Json& c : recorded_cases()) {
    const std::string what = c["format"].get<std::string>() + ": " + c["name"].get<std::string>();
    const ChatParseOptions o = options_for(c);
    const std::string text = c["text"];
    const ChatMessage final_msg = parse_chat_output(text, o, false);
    const bool well_formed = c.value("stream", true);
    ChatMessage before;
    ChatStreamDiff diff;
    std::string content, reasoning;
    std::vector<std::string> names, args;
    auto apply = [&](const std::vector<Json>& deltas) {
      for (const Json& d : deltas) {
        if (d.contains("content")) content += d["content"].get<std::string>();
        if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
        if (!d.contains("tool_calls")) continue;
        for (const Json& call : d["tool_calls"]) {
          const size_t i = call["index"];
          if (i == names.size()) {
            names.push_back(call["function"]["name"]);
            args.emplace_back();
            const std::string id = call["id"];
            if (mistral(o.format)) {
              EXPECT_TRUE(is_mistral_tool_call_id(id)) << what << ": " << id;
            }
          }
          args.at(i) += call["function"]["arguments"].get<std::string>();
        }
      }
    };
    for (size_t n = 0; n <= text.size(); ++n) {
      const ChatMessage now = parse_chat_output(std::string_view(text).substr(0, n), o, true);
      apply(diff.update(now));
      if (!well_formed) continue;  // a malformed call may be announced before it fails
      const std::string at = what + " at " + std::to_string(n) + ": " + text.substr(0, n);
      EXPECT_TRUE(is_prefix(before.content, now.content)) << at;
      EXPECT_TRUE(is_prefix(now.content, final_msg.content)) << at << " -> " << now.content;
      EXPECT_TRUE(is_prefix(before.reasoning, now.reasoning)) << at;
      EXPECT_TRUE(is_prefix(now.reasoning, final_msg.reasoning)) << at;
      ASSERT_GE(now.tool_calls.size(), before.tool_calls.size()) << at;
      ASSERT_LE(now.tool_calls.size(), final_msg.tool_calls.size()) << at;
      for (size_t i = 0; i < now.tool_calls.size(); ++i) {
        EXPECT_EQ(now.tool_calls[i].name, final_msg.tool_calls[i].name) << at;
        if (i < before.tool_calls.size()) {
          EXPECT_TRUE(is_prefix(before.tool_calls[i].arguments, now.tool_calls[i].arguments)) << at;
        }
        EXPECT_TRUE(is_prefix(now.tool_calls[i].arguments, final_msg.tool_calls[i].arguments)) << at;
      }
      before = now;
    }
    apply(diff.update(final_msg));
    // Nothing is lost: the client ends with the final message's text.
    EXPECT_EQ(content, final_msg.content) << what;
    EXPECT_EQ(reasoning, final_msg.reasoning) << what;
    if (!well_formed) continue;
    ASSERT_EQ(names.size(), final_msg.tool_calls.size()) << what;
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(names[i], final_msg.tool_calls[i].name) << what;
      EXPECT_EQ(args[i], final_msg.tool_calls[i].arguments) << what;
    }
  }
}

bool grammar_accepts(agentkv::grammar::Matcher& m, std::string_view text) {
  const auto p = m.advance(m.start(), text);
  return p.ok() && m.can_end(p);
}

std::shared_ptr<agentkv::grammar::Matcher> matcher_of(const std::string& gbnf) {
  return std::make_shared<agentkv::grammar::Matcher>(
      std::make_shared<agentkv::grammar::Grammar>(agentkv::grammar::parse_gbnf(gbnf)));
}

// The grammar of tool_choice "required" (parallel calls allowed) compiles for each format and
// admits exactly the well-formed recorded outputs; the lazy grammar of "auto" starts at the first
// trigger and admits the rest from there. (Harmony's "required" grammar starts at the answer's
// start, where an analysis message may come first; its lazy one at the trigger.)
TEST(ToolFormats, GrammarAcceptsWellFormedRefusesMalformed) {
  std::map<std::string, std::pair<std::shared_ptr<agentkv::grammar::Matcher>, std::shared_ptr<agentkv::grammar::Matcher>>> matchers;
  for (const Json& c : recorded_cases()) {
    if (!c.contains("grammar")) continue;
    const std::string what = c["format"].get<std::string>() + ": " + c["name"].get<std::string>();
    const ToolFormat f = format_named(c["format"]);
    auto& [required, lazy] = matchers[c["format"]];
    if (!required) {
      required = matcher_of(tool_call_grammar(f, request_tools(), "", true, f == ToolFormat::Harmony));
      lazy = matcher_of(tool_call_grammar(f, request_tools(), "", true, false));
    }
    const std::string text = c["text"];
    const bool accept = c["grammar"] == "accept";
    EXPECT_EQ(grammar_accepts(*required, text), accept) << what;
    if (!accept) continue;
    size_t first = std::string::npos;
    for (const std::string& t : tool_call_triggers(f))
      first = std::min(first, t[0] == '^' ? (text.compare(0, t.size() - 1, t, 1) == 0 ? 0 : std::string::npos) : text.find(t));
    ASSERT_NE(first, std::string::npos) << what << ": no trigger";
    EXPECT_TRUE(grammar_accepts(*lazy, std::string_view(text).substr(first))) << what;
  }
}

TEST(ToolFormats, NamedFunctionNotParallelAndThinkPrefix) {
  const Json tools = request_tools();
  struct Case {
    ToolFormat f;
    std::string one, two;  // a call of read_file; two of them
  };
  const Case cases[] = {
      {ToolFormat::Llama3Json, R"({"name": "read_file", "parameters": {"path": "a"}})", ""},
      {ToolFormat::MistralNemo, R"([TOOL_CALLS][{"name": "read_file", "arguments": {"path": "a"}, "id": "abcdefghi"}])",
       R"([TOOL_CALLS][{"name": "read_file", "arguments": {"path": "a"}, "id": "abcdefghi"}, {"name": "read_file", "arguments": {"path": "b"}, "id": "abcdefghj"}])"},
      {ToolFormat::MistralArgs, R"([TOOL_CALLS]read_file[ARGS]{"path": "a"})",
       R"([TOOL_CALLS]read_file[ARGS]{"path": "a"}[TOOL_CALLS]read_file[ARGS]{"path": "b"})"},
      {ToolFormat::MistralCallId, R"([TOOL_CALLS]read_file[CALL_ID]abcdefghi[ARGS]{"path": "a"})",
       R"([TOOL_CALLS]read_file[CALL_ID]abcdefghi[ARGS]{"path": "a"}[TOOL_CALLS]read_file[CALL_ID]abcdefghj[ARGS]{"path": "b"})"},
  };
  for (const Case& c : cases) {
    const char* what = tool_format_name(c.f);
    auto compile = [&](const std::string& name, bool parallel, bool think) {
      return agentkv::grammar::Matcher(std::make_shared<agentkv::grammar::Grammar>(
          agentkv::grammar::parse_gbnf(tool_call_grammar(c.f, tools, name, parallel, think))));
    };
    auto named = compile("read_file", false, false);
    EXPECT_TRUE(grammar_accepts(named, c.one)) << what;
    if (!c.two.empty()) {
      EXPECT_FALSE(grammar_accepts(named, c.two)) << what;  // not parallel
    }
    std::string other = c.one;
    other.replace(other.find("read_file"), 9, "get_weather");
    EXPECT_FALSE(grammar_accepts(named, other)) << what;
    if (!c.two.empty()) {
      auto parallel = compile("", true, false);
      EXPECT_TRUE(grammar_accepts(parallel, c.two)) << what;
    }
    auto after_think = compile("", false, true);
    EXPECT_TRUE(grammar_accepts(after_think, "plan\n</think>\n\n" + c.one)) << what;
    EXPECT_THROW(tool_call_grammar(c.f, tools, "missing", false, false), agentkv::Error) << what;
  }
  // Llama 3 templates render one call per turn: its grammar writes one even when parallel.
  auto llama = agentkv::grammar::Matcher(std::make_shared<agentkv::grammar::Grammar>(
      agentkv::grammar::parse_gbnf(tool_call_grammar(ToolFormat::Llama3Json, tools, "", true, false))));
  EXPECT_FALSE(grammar_accepts(llama, std::string(cases[0].one) + "; " + cases[0].one));
}

// Found by fuzz/tool_call_fuzz.cpp: a model may write bytes that are not UTF-8 anywhere, here in
// an XML parameter's name; the arguments are still JSON (U+FFFD in place of the bad byte).
TEST(ToolFormats, BytesThatAreNotUtf8DoNotThrow) {
  ChatParseOptions o;
  o.parse_tools = true;
  o.format = ToolFormat::QwenXml;
  const std::string text = "<tool_call>\n<function=f>\n<parameter=\x8a>\n1\n</parameter>\n</function>\n</tool_call>";
  ChatMessage m;
  ASSERT_NO_THROW(m = parse_chat_output(text, o, false));
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_TRUE(Json::accept(m.tool_calls[0].arguments));
  for (ToolFormat f : {ToolFormat::Llama3Json, ToolFormat::MistralNemo, ToolFormat::MistralArgs}) {
    o.format = f;
    for (const char* bad : {"{\"name\": \"\x8a\", \"parameters\": {\"\xff\": 1}}", "<|python_tag|>\xe2\x82",
                            "[TOOL_CALLS][{\"name\": \"\xc3\", \"arguments\": {}}]", "[TOOL_CALLS]f[ARGS]{\"\x80\": 1}"})
      for (bool partial : {true, false}) EXPECT_NO_THROW(parse_chat_output(bad, o, partial)) << tool_format_name(f) << bad;
  }
}

TEST(ToolFormats, MistralIds) {
  EXPECT_TRUE(is_mistral_tool_call_id("a1B2c3D4e"));
  EXPECT_FALSE(is_mistral_tool_call_id("a1B2c3D4"));
  EXPECT_FALSE(is_mistral_tool_call_id("a1B2c3D4_"));
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(is_mistral_tool_call_id(make_tool_call_id(ToolFormat::MistralNemo)));
  EXPECT_EQ(make_tool_call_id(ToolFormat::Llama3Json).rfind("call_", 0), 0u);
  // Streaming: a Mistral call has its id from its first partial parse (the model's when written
  // before the arguments, as Small 3.2 does).
  ChatParseOptions o;
  o.parse_tools = true;
  o.format = ToolFormat::MistralCallId;
  ChatMessage m = parse_chat_output("[TOOL_CALLS]f[CALL_ID]abcdefghi[ARGS]{\"a\": ", o, true);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].id, "abcdefghi");
  o.format = ToolFormat::MistralNemo;
  m = parse_chat_output("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": ", o, true);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_TRUE(is_mistral_tool_call_id(m.tool_calls[0].id));
}

// Templates: ../shared/fixtures/templates (llama.cpp's copies of the vendors' templates).
std::filesystem::path templates_dir() { return std::filesystem::path(AGENTKV_FIXTURES_DIR) / "templates"; }

const std::map<std::string, ToolFormat>& expected_formats() {
  static const std::map<std::string, ToolFormat> m = {
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolFormat::MistralCallId},
      {"Qwen-Qwen3-0.6B.jinja", ToolFormat::Hermes},
      {"Qwen3-Coder.jinja", ToolFormat::QwenXml},
      {"Qwen3.5-4B.jinja", ToolFormat::QwenXml},
      {"google-gemma-2-2b-it.jinja", ToolFormat::Hermes},    // no tool format of its own: the default
      {"google-gemma-4-31B-it.jinja", ToolFormat::Hermes},   // its <|tool_call> format is not supported yet
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolFormat::Llama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolFormat::Llama3Json},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolFormat::MistralNemo},
      {"openai-gpt-oss-120b.jinja", ToolFormat::Harmony},
      {"unsloth-mistral-Devstral-Small-2507.jinja", ToolFormat::MistralArgs},
  };
  return m;
}

TEST(ToolFormats, EveryFixtureTemplateMapsToItsFormat) {
  AGENTKV_NEEDS_FIXTURES();
  size_t seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(templates_dir())) {
    const std::string file = entry.path().filename().string();
    auto it = expected_formats().find(file);
    ASSERT_NE(it, expected_formats().end()) << file << ": a new template; say which tool format it has";
    EXPECT_STREQ(tool_format_name(detect_tool_format(read_text(entry.path()))), tool_format_name(it->second)) << file;
    ++seen;
  }
  EXPECT_EQ(seen, expected_formats().size());
}

TEST(ToolFormats, ObjectArgumentsForTemplatesThatDumpThem) {
  AGENTKV_NEEDS_FIXTURES();
  const std::map<std::string, bool> wants = {
      {"Qwen-Qwen3-0.6B.jinja", false},  // prints a string as is (the model's own text)
      {"Qwen3.5-4B.jinja", true},        // iterates
      {"Qwen3-Coder.jinja", true},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", true},  // arguments | tojson
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", true},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", true},  // function|tojson
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", true},
      {"unsloth-mistral-Devstral-Small-2507.jinja", false},  // tojson only when not a string
      {"openai-gpt-oss-120b.jinja", true},                   // arguments|tojson
  };
  for (const auto& [file, want] : wants)
    EXPECT_EQ(template_wants_object_arguments(read_text(templates_dir() / file)), want) << file;
}

// A conversation with one call and its result, rendered by each template the way the server
// hands it messages (arguments a JSON string, made an object where the template wants one);
// the assistant turn's text is what the model would have written, which the parser reads back.
TEST(ToolFormats, TemplatesRenderCallsTheParserReadsBack) {
  AGENTKV_NEEDS_FIXTURES();
  struct Case {
    std::string file;
    std::string rendered_call;  // what the template writes for the call
  };
  const Case cases[] = {
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", R"({"name": "get_weather", "parameters": {"location": "Paris"}})"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", R"({"name": "get_weather", "parameters": {"location": "Paris"}})"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja",
       R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris"}, "id": "a1b2c3d4e"}])"},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", R"([TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"location": "Paris"})"},
      {"unsloth-mistral-Devstral-Small-2507.jinja", R"([TOOL_CALLS]get_weather[ARGS]{"location": "Paris"})"},
      {"openai-gpt-oss-120b.jinja",
       R"(<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Paris"}<|call|>)"},
  };
  for (const Case& c : cases) {
    const std::string source = read_text(templates_dir() / c.file);
    agentkv::ChatTemplateInputs in;
    Json call = Json::parse(R"({"id": "a1b2c3d4e", "type": "function", "function": {"name": "get_weather",
                                 "arguments": "{\"location\": \"Paris\"}"}})");
    if (template_wants_object_arguments(source))
      call["function"]["arguments"] = Json::parse(call["function"]["arguments"].get<std::string>());
    in.messages = Json::array({Json{{"role", "user"}, {"content", "Weather in Paris?"}},
                               Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}},
                               Json{{"role", "tool"}, {"tool_call_id", "a1b2c3d4e"}, {"content", "sunny"}}});
    in.tools = Json::array({request_tools()[0]});
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    in.extra_context = Json{{"date_string", "06 Dec 2026"}};
    std::string prompt;
    try {
      prompt = agentkv::ChatTemplate(source).render(in);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.file << ": " << e.what();
      continue;
    }
    EXPECT_NE(prompt.find(c.rendered_call), std::string::npos) << c.file << ":\n" << prompt;
    ChatParseOptions o;
    o.format = detect_tool_format(source);
    o.parse_tools = true;
    o.tools = in.tools;
    const ChatMessage m = parse_chat_output(c.rendered_call, o, false);
    ASSERT_EQ(m.tool_calls.size(), 1u) << c.file;
    EXPECT_EQ(m.tool_calls[0].name, "get_weather") << c.file;
    EXPECT_EQ(Json::parse(m.tool_calls[0].arguments), Json::parse(R"({"location": "Paris"})")) << c.file;
    EXPECT_EQ(m.content, "") << c.file;
  }
}

// Templates that write a call's arguments back with tojson: for random arguments (quotes,
// backslashes, control characters, non-ASCII), the text the template renders for the call is
// text the tool grammar lets the model write, and the grammar refuses any other spacing, so the
// next turn's prompt holds the answer's own text (its tokens stay cached).
TEST(ToolFormats, GrammarWritesArgumentsAsTheTemplateRendersThem) {
  AGENTKV_NEEDS_FIXTURES();
  const char* const files[] = {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
                               "mistralai-Mistral-Nemo-Instruct-2407.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja",
                               "openai-gpt-oss-120b.jinja"};
  const std::vector<std::string> pieces = {"a", "Z", "7", " ", "\"", "\\", "/", "\n", "\t", "\x01", "\xc3\xa9", "\xe5\xbf\x83", ":", ","};
  std::mt19937 rng(7);
  auto random_text = [&] {
    std::string t;
    for (int n = rng() % 6; n > 0; --n) t += pieces[rng() % pieces.size()];
    return t;
  };
  const Json tools = request_tools();
  for (const char* file : files) {
    const std::string source = read_text(templates_dir() / file);
    ASSERT_TRUE(template_dumps_arguments(source)) << file;
    const ToolFormat f = detect_tool_format(source);
    agentkv::grammar::Matcher m(std::make_shared<agentkv::grammar::Grammar>(
        agentkv::grammar::parse_gbnf(tool_call_grammar(f, tools, "", false, false, /*tojson_arguments=*/true))));
    for (int round = 0; round < 40; ++round) {
      const bool weather = round % 2 == 0;
      Json args = weather ? Json{{"location", random_text()}} : Json{{"path", random_text()}, {"content", random_text()}};
      if (weather && rng() % 2) args["unit"] = rng() % 2 ? "celsius" : "fahrenheit";
      Json call = {{"id", "a1b2c3d4e"}, {"type", "function"},
                   {"function", {{"name", weather ? "get_weather" : "write_file"}, {"arguments", args}}}};
      agentkv::ChatTemplateInputs in;
      in.messages = Json::array({Json{{"role", "user"}, {"content", "Go."}},
                                 Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}},
                                 Json{{"role", "tool"}, {"tool_call_id", "a1b2c3d4e"}, {"content", "RESULT"}}});
      in.tools = tools;
      in.bos_token = "<s>";
      in.eos_token = "</s>";
      in.extra_context = Json{{"date_string", "06 Dec 2026"}};
      const std::string prompt = agentkv::ChatTemplate(source).render(in);
      // The call: from the format's trigger before the tool result to the end of the turn (the
      // first trigger that may come after other text).
      const size_t result = prompt.find("RESULT");
      ASSERT_NE(result, std::string::npos) << file;
      std::string trigger = tool_call_triggers(f)[0];
      if (trigger[0] == '^') trigger = tool_call_triggers(f)[1];
      const size_t begin = prompt.rfind(trigger, result);
      ASSERT_NE(begin, std::string::npos) << file << ":\n" << prompt;
      size_t end = std::string::npos;
      for (const char* stop : {"<|eot_id|>", "<|eom_id|>", "</s>", "<|call|>"}) end = std::min(end, prompt.find(stop, begin));
      ASSERT_NE(end, std::string::npos) << file;
      const std::string text = prompt.substr(begin, end - begin);
      EXPECT_TRUE(grammar_accepts(m, text)) << file << ": " << text;
      // The same call with the separators spaced otherwise.
      for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{{"\": ", "\":"}, {"\": ", "\" : "}, {", \"", ",\""}}) {
        const std::string key = "\"" + std::string(weather ? "location" : "path") + from;
        std::string other = text;
        const size_t k = other.find(key);
        if (k == std::string::npos) continue;
        if (from == ", \"") {
          const size_t c = other.find(", \"content\": ");
          if (c == std::string::npos) continue;
          other.replace(c, 3, ",\"");
        } else {
          other.replace(k + key.size() - from.size(), from.size(), to);
        }
        EXPECT_FALSE(grammar_accepts(m, other)) << file << ": " << other;
      }
    }
  }
}

// Harmony's two grammars. tool_choice required / named (from the answer's start): one analysis
// message at most, then the call in the form the template renders back (recipient in the role,
// " json"), so the next turn holds the answer's own text; gpt-oss's other forms are refused. The
// lazy grammar of auto (from the trigger " to=functions."): any of the forms.
TEST(ToolFormats, HarmonyGrammars) {
  const Json tools = request_tools();
  const auto required = matcher_of(tool_call_grammar(ToolFormat::Harmony, tools, "", true, true));
  const auto named = matcher_of(tool_call_grammar(ToolFormat::Harmony, tools, "read_file", false, true));
  const auto lazy = matcher_of(tool_call_grammar(ToolFormat::Harmony, tools, "", true, false));
  const std::string call = R"( to=functions.read_file<|channel|>commentary json<|message|>{"path": "a"})";
  const std::string analysis = "<|channel|>analysis<|message|>Read it.<|end|><|start|>assistant";
  EXPECT_TRUE(grammar_accepts(*required, call));
  EXPECT_TRUE(grammar_accepts(*required, analysis + call));
  EXPECT_TRUE(grammar_accepts(*named, analysis + call));
  EXPECT_FALSE(grammar_accepts(*named, R"( to=functions.get_weather<|channel|>commentary json<|message|>{"location": "x"})"));
  EXPECT_FALSE(grammar_accepts(*required, analysis + analysis + call));  // one analysis message
  EXPECT_FALSE(grammar_accepts(*required, "<|channel|>analysis<|message|>a <|end|> b<|end|><|start|>assistant" + call));
  EXPECT_FALSE(grammar_accepts(*required, "<|channel|>final<|message|>No call."));
  EXPECT_FALSE(grammar_accepts(*required, call + call));  // <|call|> ends the answer: one call
  for (const char* form : {R"( to=functions.read_file <|constrain|>json<|message|>{"path": "a"})",
                           R"( to=functions.read_file<|message|>{"path": "a"})",
                           R"( to=functions.read_file json<|message|>{"path": "a"})",
                           R"( to=functions.read_file<|channel|>commentary <|constrain|>json<|message|>{"path": "a"})"}) {
    EXPECT_FALSE(grammar_accepts(*required, form)) << form;
    EXPECT_TRUE(grammar_accepts(*lazy, form)) << form;
  }
  EXPECT_TRUE(grammar_accepts(*lazy, call));
  EXPECT_TRUE(grammar_accepts(*lazy, "<|start|>assistant" + call));
  EXPECT_TRUE(grammar_accepts(*lazy, R"(<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>{"path": "a"})"));
  EXPECT_FALSE(grammar_accepts(*lazy, R"( to=functions.delete_all<|message|>{})"));
  // What the grammar writes, the parser reads as the call (after the prompt's <|start|>assistant).
  ChatParseOptions o;
  o.format = ToolFormat::Harmony;
  o.parse_tools = true;
  o.tools = tools;
  const ChatMessage m = parse_chat_output(analysis + call, o, false);
  EXPECT_EQ(m.reasoning, "Read it.");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "read_file");
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"path": "a"})");
  EXPECT_EQ(m.tool_calls[0].id.rfind("call_", 0), 0u);
}

// tool_choice auto on gpt-oss: the lazy grammar starts at a recipient in a header (at the answer's
// start, after <|start|>assistant or after the channel), not at one an analysis body mentions.
TEST(ToolFormats, HarmonyLazyGrammarStartsInAHeader) {
  const auto matcher = matcher_of(tool_call_grammar(ToolFormat::Harmony, request_tools(), "", true, false));
  const agentkv::grammar::TokenTrie trie(std::vector<std::string>{"x"}, {});
  GrammarSettings settings;
  settings.lazy = true;
  settings.triggers = tool_call_triggers(ToolFormat::Harmony);
  auto feed = [&](const std::vector<std::string>& pieces) {
    GrammarRun run(matcher, trie, settings);
    for (const std::string& p : pieces) run.accept(0, p);
    return run.active();
  };
  EXPECT_TRUE(feed({" to", "=functions", ".read"}));
  EXPECT_TRUE(feed({"<|channel|>", "analysis", "<|message|>", "Hm.", "<|end|>", "<|start|>", "assistant", " to=functions."}));
  EXPECT_TRUE(feed({"<|channel|>", "commentary", " to", "=functions.", "read_file"}));
  EXPECT_FALSE(feed({"<|channel|>", "analysis", "<|message|>", "Then to=functions.read_file it is."}));
  EXPECT_FALSE(feed({"<|channel|>", "final", "<|message|>", "Say to=functions.x"}));
}

// response_format / json_schema with gpt-oss: the schema's JSON is the final channel's message.
TEST(ToolFormats, HarmonyResponseFormatConstrainsTheFinalMessage) {
  const Json schema = Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})");
  const auto m = matcher_of(harmony_response_grammar(schema));
  EXPECT_TRUE(grammar_accepts(*m, R"(<|channel|>final<|message|>{"n": 3})"));
  EXPECT_TRUE(grammar_accepts(*m, R"(<|channel|>analysis<|message|>Three.<|end|><|start|>assistant<|channel|>final<|message|>{"n": 3})"));
  EXPECT_FALSE(grammar_accepts(*m, R"({"n": 3})"));
  EXPECT_FALSE(grammar_accepts(*m, R"(<|channel|>final<|message|>{"n": "3"})"));
  ChatParseOptions o;
  o.format = ToolFormat::Harmony;
  const ChatMessage msg = parse_chat_output(R"(<|channel|>analysis<|message|>Three.<|end|><|start|>assistant<|channel|>final<|message|>{"n": 3})", o, false);
  EXPECT_EQ(msg.content, R"({"n": 3})");
  EXPECT_EQ(msg.reasoning, "Three.");
  EXPECT_THROW(harmony_response_grammar(Json::parse(R"({"type": "object", "multipleOf": 2})")), agentkv::Error);
}

// Without tools (or tool_choice none) the channels still split; a call is then text. With
// reasoning_format "none" an analysis message is content, its tags included (llama.cpp's).
TEST(ToolFormats, HarmonyWithoutToolsOrReasoning) {
  const std::string text = "<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant<|channel|>final<|message|>Hi.";
  ChatParseOptions o;
  o.format = ToolFormat::Harmony;
  ChatMessage m = parse_chat_output(text, o, false);
  EXPECT_EQ(m.reasoning, "Hmm.");
  EXPECT_EQ(m.content, "Hi.");
  const std::string call = R"( to=functions.read_file<|channel|>commentary json<|message|>{"path": "a"})";
  m = parse_chat_output(call, o, false);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, call);
  o.parse_reasoning = false;
  m = parse_chat_output(text, o, true);
  EXPECT_EQ(m.reasoning, "");
  EXPECT_EQ(m.content, "<|channel|>analysis<|message|>Hmm.<|end|>Hi.");
  EXPECT_EQ(parse_chat_output("<|channel|>analysis<|message|>Hm<|en", o, true).content, "<|channel|>analysis<|message|>Hm");
}

// Harmony's builtin tools (browser / python, docs/agents.md): the template cannot render such a
// call back (it writes every call as to=functions.NAME), so the message stays content, verbatim,
// with or without declared tools, streamed or not; what came before it parses as usual.
TEST(ToolFormats, HarmonyBuiltinToolCallsStayContent) {
  ChatParseOptions o;
  o.format = ToolFormat::Harmony;
  o.parse_tools = true;
  o.tools = Json::parse(R"([{"type":"function","function":{"name":"search","parameters":{"type":"object"}}}])");
  const std::string browser = R"(<|start|>assistant<|channel|>commentary to=browser.search json<|message|>{"query": "q"})";
  const std::string python = "<|start|>assistant to=python<|channel|>analysis code<|message|>print(1)";
  for (const std::string& call : {browser, python})
    for (bool partial : {false, true}) {
      const ChatMessage m = parse_chat_output("<|channel|>analysis<|message|>Look it up.<|end|>" + call, o, partial);
      EXPECT_TRUE(m.tool_calls.empty()) << call;
      EXPECT_EQ(m.reasoning, "Look it up.");
      EXPECT_EQ(m.content, call);
    }
}

// A vocabulary for a ChatFormatter over a template that names its tokens in text.
agentkv::VocabData tiny_vocab() {
  agentkv::VocabData v;
  v.tokens = {"<|start|>", "<|return|>", "a"};
  v.eos = 1;
  return v;
}

// The next turn of an agent on gpt-oss: the client sends back the parsed answer (reasoning_content,
// tool_calls with string arguments) and the tool's result; the server renders the prompt with the
// template (ChatFormatter: reasoning_content becomes the template's `thinking`). The new prompt
// starts with the previous prompt and the answer's own text, so every token of it stays cached.
// Without reasoning_content the template drops the analysis, and the prompts part right after
// the previous generation prompt.
TEST(ToolFormats, HarmonyNextTurnHoldsTheAnswersText) {
  AGENTKV_NEEDS_FIXTURES();
  const agentkv::Tokenizer tok(tiny_vocab());
  const ChatFormatter chat(tok, read_text(templates_dir() / "openai-gpt-oss-120b.jinja"));
  Json tools = request_tools();
  tools[0]["function"].erase("description");  // llama.cpp's engine prints "" for it, as does agentkv's
  const Json user = Json::parse(R"({"role": "user", "content": "Weather in Paris?"})");
  const std::string prompt = chat.apply(Json{{"messages", Json::array({user})}, {"tools", tools}});
  EXPECT_NE(prompt.find("// \ntype get_weather"), std::string::npos) << prompt;
  ASSERT_EQ(prompt.substr(prompt.size() - 18), "<|start|>assistant");
  const std::string answer =
      R"(<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Paris"})";
  ChatParseOptions o;
  o.format = detect_tool_format(chat.template_source());
  o.parse_tools = true;
  o.tools = tools;
  const ChatMessage m = parse_chat_output(answer, o, false);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  Json assistant = {{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", m.reasoning},
                    {"tool_calls", tool_calls_json(m.tool_calls)}};
  const Json result = {{"role", "tool"}, {"tool_call_id", m.tool_calls[0].id}, {"content", "sunny"}};
  const std::string next = chat.apply(Json{{"messages", Json::array({user, assistant, result})}, {"tools", tools}});
  EXPECT_EQ(next.substr(0, prompt.size() + answer.size()), prompt + answer) << next;
  // A client that drops reasoning_content: the template renders the call without its analysis.
  assistant.erase("reasoning_content");
  const std::string without = chat.apply(Json{{"messages", Json::array({user, assistant, result})}, {"tools", tools}});
  EXPECT_EQ(without.substr(0, prompt.size() + 14), prompt + " to=functions.") << without;
}

// A continued answer (a final assistant message: llama-server's prefill) on gpt-oss: the prompt
// opens the message that continues, as llama.cpp frames it, and the output is parsed from inside
// that message's body.
TEST(ToolFormats, HarmonyContinuedAnswer) {
  AGENTKV_NEEDS_FIXTURES();
  const agentkv::Tokenizer tok(tiny_vocab());
  const ChatFormatter chat(tok, read_text(templates_dir() / "openai-gpt-oss-120b.jinja"));
  const Json user = Json::parse(R"({"role": "user", "content": "Sum?"})");
  ChatParseOptions o;
  o.format = ToolFormat::Harmony;
  // The final message continues (after an empty analysis, as llama.cpp writes it).
  std::string prompt = chat.apply(Json{{"messages", Json::array({user, Json{{"role", "assistant"}, {"content", "It is"}}})}});
  EXPECT_EQ(prompt.substr(prompt.rfind("<|end|><|start|>user")),
            "<|end|><|start|>user<|message|>Sum?<|end|><|start|>assistant<|channel|>analysis<|message|><|end|>"
            "<|start|>assistant<|channel|>final<|message|>It is");
  o.harmony_open_header = harmony_open_header(prompt);
  EXPECT_EQ(o.harmony_open_header, "<|channel|>final<|message|>");
  ChatMessage m = parse_chat_output(" 42.", o, false);
  EXPECT_EQ(m.content, " 42.");
  EXPECT_EQ(m.reasoning, "");
  // Reasoning only: the analysis continues.
  prompt = chat.apply(Json{{"messages", Json::array({user, Json{{"role", "assistant"}, {"content", ""}, {"reasoning_content", "Let me"}}})}});
  EXPECT_EQ(prompt.substr(prompt.rfind("<|start|>")), "<|start|>assistant<|channel|>analysis<|message|>Let me");
  o.harmony_open_header = harmony_open_header(prompt);
  m = parse_chat_output(" add.<|end|><|start|>assistant<|channel|>final<|message|>42", o, false);
  EXPECT_EQ(m.reasoning, " add.");
  EXPECT_EQ(m.content, "42");
  // A prompt that ends with the generation prompt, or a finished message, opens none.
  EXPECT_EQ(harmony_open_header(chat.apply(Json{{"messages", Json::array({user})}})), "");
  EXPECT_EQ(harmony_open_header("<|start|>assistant<|channel|>final<|message|>x<|end|>"), "");
  EXPECT_EQ(harmony_open_header("<|start|>functions.f to=assistant<|channel|>commentary<|message|>x"), "");
}

TEST(ToolFormats, PreservedTokensAndTriggers) {
  EXPECT_EQ(tool_call_triggers(ToolFormat::Hermes), std::vector<std::string>{"<tool_call>"});
  EXPECT_TRUE(tool_call_preserved_tokens(ToolFormat::Hermes).empty());
  EXPECT_EQ(tool_call_preserved_tokens(ToolFormat::MistralCallId), (std::vector<std::string>{"[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"}));
  EXPECT_EQ(tool_call_triggers(ToolFormat::MistralNemo), std::vector<std::string>{"[TOOL_CALLS]"});
  EXPECT_EQ(tool_call_preserved_tokens(ToolFormat::Llama3Json), std::vector<std::string>{"<|python_tag|>"});
  EXPECT_EQ(tool_call_triggers(ToolFormat::Harmony),
            (std::vector<std::string>{"^ to=functions.", "<|start|>assistant to=functions.",
                                      "<|channel|>commentary to=functions.", "<|channel|>analysis to=functions."}));
}

}  // namespace
