#include "server/agent_request.h"

#include <map>
#include <set>

#include "agentkv/error.h"
#include "agentkv/gbnf.h"
#include "agentkv/json_schema.h"
#include "server/json_fields.h"
#include "server/server_error.h"

namespace agentkv::server {

namespace {

// Fields every completion endpoint reads.
const std::set<std::string> kCommon = {
    "model", "n_predict", "max_tokens", "max_completion_tokens", "temperature", "top_k", "top_p", "min_p",
    "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty", "seed", "stop", "logit_bias",
    "n_keep", "n_discard", "kv_evict", "cache_prompt", "n_fake_cached", "id_slot", "session_id", "cache_salt", "stream", "stream_options", "timings_per_token", "verbose", "ignore_eos", "return_progress", "n", "n_cmpl",
    // Where sampling runs: agentkv samples on the CPU whatever the request says.
    "backend_sampling",
    // Speculative decoding (docs/speculative.md; p_min concerns draft models: read, checked, unused).
    "speculative.type", "speculative.n_max", "speculative.n_min", "speculative.p_min", "speculative.adaptive",
    "grammar", "json_schema", "response_format",
    // Identity / bookkeeping fields of OpenAI clients: they do not change the output.
    "user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"};
const std::set<std::string> kNative = {"prompt", "return_tokens", "n_probs", "post_sampling_probs", "response_fields"};
const std::set<std::string> kOaiCompletion = {"prompt", "logprobs", "return_tokens", "n_probs", "post_sampling_probs"};
// Embeddings (native and OpenAI): the completion fields do not apply.
const std::set<std::string> kEmbedding = {"input", "content", "model", "encoding_format", "embd_normalize", "user"};
const std::set<std::string> kOaiChat = {"messages", "tools", "tool_choice", "parallel_tool_calls", "reasoning_format",
                                        "reasoning_budget_tokens", "thinking_budget_tokens",
                                        "continue_final_message",
                                        "chat_template_kwargs", "add_generation_prompt", "logprobs", "top_logprobs",
                                        "return_tokens", "n_probs", "post_sampling_probs"};
// llama-server / OpenAI fields agentkv does not implement, accepted only at the value that
// turns them off.
const std::map<std::string, Json> kNeutral = {
    {"typical_p", 1.0},       {"tfs_z", 1.0},          {"mirostat", 0},
    {"dynatemp_range", 0.0}, {"xtc_probability", 0.0}, {"dry_multiplier", 0.0},
    {"top_n_sigma", -1.0},   {"echo", false},      {"best_of", 1},
    {"n_indent", 0},          {"t_max_predict_ms", 0}, {"parallel_tool_calls", true}};

bool neutral(const Json& v, const Json& off) {
  if (v.is_null()) return true;
  if (off.is_boolean()) return v.is_boolean() && v == off;
  if (off.is_number()) return v.is_number() && v.get<double>() == off.get<double>();
  return v == off;
}

std::shared_ptr<const grammar::Grammar> compile(const std::string& gbnf, const std::string& what) {
  try {
    return std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf));
  } catch (const Error& e) {
    throw invalid_request(what + ": " + e.what());
  }
}

std::string schema_grammar(const Json& schema, const std::string& what, bool harmony) {
  if (!schema.is_object() && !schema.is_boolean()) throw invalid_request(what + " must be a JSON schema object");
  try {
    return harmony ? harmony_response_grammar(schema) : grammar::json_schema_to_gbnf(schema);
  } catch (const Error& e) {
    throw invalid_request(what + ": " + e.what());
  }
}

}  // namespace

void check_known_fields(const Json& body, Endpoint e) {
  const bool completion = e != Endpoint::Embedding;
  const std::set<std::string>& own = e == Endpoint::Native      ? kNative
                                     : e == Endpoint::OaiChat   ? kOaiChat
                                     : e == Endpoint::Embedding ? kEmbedding
                                                                : kOaiCompletion;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    if ((completion && kCommon.count(k)) || own.count(k)) continue;
    auto n = completion ? kNeutral.find(k) : kNeutral.end();
    if (n != kNeutral.end()) {
      if (neutral(it.value(), n->second)) continue;
      throw invalid_request("field '" + k + "' is not supported by agentkv (only " + n->second.dump() +
                            ", which turns it off, is accepted)");
    }
    throw invalid_request("field '" + k + "' is not supported by agentkv");
  }
}

void parse_constraints(const Json& body, Endpoint e, CompletionParams& p, bool harmony) {
  std::string gbnf, source;
  if (has_field(body, "grammar")) {
    if (!body["grammar"].is_string()) throw invalid_request("field 'grammar' must be a string");
    gbnf = body["grammar"].get<std::string>();
    source = "grammar";
  }
  if (has_field(body, "json_schema")) {
    if (!source.empty()) throw invalid_request("either 'json_schema' or 'grammar' can be given, not both");
    gbnf = schema_grammar(body["json_schema"], "field 'json_schema'", harmony);
    source = "json_schema";
  }
  if (has_field(body, "response_format")) {
    const Json& rf = body["response_format"];
    if (!rf.is_object()) throw invalid_request("field 'response_format' must be an object");
    const std::string type = read_string(rf, "type", "");
    if (type == "json_object" || type == "json_schema") {
      if (!source.empty()) throw invalid_request("'response_format' cannot be combined with '" + source + "'");
      Json schema = Json{{"type", "object"}};
      if (type == "json_schema") {
        if (rf.contains("json_schema")) {
          const Json& js = rf["json_schema"];
          if (!js.is_object() || !js.contains("schema"))
            throw invalid_request("response_format.json_schema must be an object with a 'schema'");
          schema = js["schema"];
        } else if (rf.contains("schema")) {
          schema = rf["schema"];
        } else {
          throw invalid_request("response_format of type json_schema needs 'json_schema': {\"schema\": ...}");
        }
      } else if (rf.contains("schema")) {
        schema = rf["schema"];
      }
      gbnf = schema_grammar(schema, "response_format schema", harmony);
      source = "response_format";
    } else if (type != "text") {
      throw invalid_request("response_format.type must be 'text', 'json_object' or 'json_schema'");
    }
  }
  if (!source.empty()) p.grammar.grammar = compile(gbnf, "field '" + source + "'");

  // Probabilities.
  p.post_sampling_probs = read_bool(body, "post_sampling_probs", false);
  p.n_probs = static_cast<int32_t>(read_int(body, "n_probs", 0, 0, 100));
  if (e == Endpoint::OaiChat) {
    const bool lp = read_bool(body, "logprobs", false);
    const int64_t top = read_int(body, "top_logprobs", 0, 0, 20);
    if (has_field(body, "top_logprobs") && !lp) throw invalid_request("'top_logprobs' needs 'logprobs': true");
    if (lp) {
      p.with_logprobs = true;
      p.n_probs = std::max<int32_t>(p.n_probs, static_cast<int32_t>(top));
    }
  } else if (e == Endpoint::OaiCompletion && has_field(body, "logprobs")) {
    const Json& lp = body["logprobs"];
    if (lp.is_boolean()) {
      p.with_logprobs = lp.get<bool>();
    } else {
      p.n_probs = std::max<int32_t>(p.n_probs, static_cast<int32_t>(read_int(body, "logprobs", 0, 0, 20)));
      p.with_logprobs = true;
    }
  }
  if (p.n_probs > 0) p.with_logprobs = true;
}

void read_reasoning_budget(const Json& body, ToolFormat format, const std::string& prompt, bool thinking_open,
                           CompletionParams& p) {
  const char* key = has_field(body, "reasoning_budget_tokens") ? "reasoning_budget_tokens" : "thinking_budget_tokens";
  p.reasoning_budget = static_cast<int32_t>(read_int(body, key, -1, -1, INT32_MAX));
  if (format == ToolFormat::Harmony) {  // the analysis channel; the answer's header follows its end
    p.reasoning_start = "<|channel|>analysis<|message|>";
    p.reasoning_end = "<|end|><|start|>assistant";
    p.reasoning_open = prompt.size() >= p.reasoning_start.size() &&
                       prompt.compare(prompt.size() - p.reasoning_start.size(), p.reasoning_start.size(), p.reasoning_start) == 0;
  } else {
    p.reasoning_start = "<think>";
    p.reasoning_end = "</think>";
    p.reasoning_open = thinking_open;
  }
}

ChatParseOptions parse_chat_options(const Json& body, ToolFormat format, const std::string& prompt, CompletionParams& p,
                                    bool tojson_arguments) {
  ChatParseOptions o;
  o.format = format;
  const std::string reasoning = read_string(body, "reasoning_format", "auto");
  if (reasoning == "none") {
    o.parse_reasoning = false;
  } else if (reasoning != "auto" && reasoning != "deepseek") {
    throw invalid_request("reasoning_format must be 'none', 'auto' or 'deepseek'");
  }
  {
    size_t end = prompt.size();
    while (end > 0 && (prompt[end - 1] == '\n' || prompt[end - 1] == ' ')) --end;
    o.thinking_open = end >= 7 && prompt.compare(end - 7, 7, "<think>") == 0;
  }
  if (format == ToolFormat::Harmony) o.harmony_open_header = harmony_open_header(prompt);
  read_reasoning_budget(body, format, prompt, o.thinking_open, p);

  Json tools = Json::array();
  if (has_field(body, "tools")) {
    if (!body["tools"].is_array()) throw invalid_request("field 'tools' must be an array");
    for (size_t i = 0; i < body["tools"].size(); ++i) {
      const Json& t = body["tools"][i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || read_string(t, "type", "function") != "function" || !t.contains("function") || !t["function"].is_object())
        throw invalid_request(where + " must be {\"type\": \"function\", \"function\": {...}}");
      const Json& fn = t["function"];
      if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
        throw invalid_request(where + ".function.name must be a non-empty string");
      if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object())
        throw invalid_request(where + ".function.parameters must be a JSON schema object");
      tools.push_back(t);
    }
  }
  std::string choice = "auto", name;
  if (has_field(body, "tool_choice")) {
    const Json& tc = body["tool_choice"];
    if (tc.is_string()) {
      choice = tc.get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required")
        throw invalid_request("tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", ...}");
    } else if (tc.is_object() && read_string(tc, "type", "") == "function" && tc.contains("function") &&
               tc["function"].is_object() && tc["function"].contains("name") && tc["function"]["name"].is_string()) {
      choice = "function";
      name = tc["function"]["name"].get<std::string>();
    } else {
      throw invalid_request("tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  }
  const bool parallel = read_bool(body, "parallel_tool_calls", true);
  if (tools.empty()) {
    if (choice == "required" || choice == "function")
      throw invalid_request("tool_choice '" + (choice == "function" ? name : choice) + "' needs 'tools'");
    return o;
  }
  o.tools = tools;
  if (choice == "none") return o;
  o.parse_tools = true;
  if (p.grammar.grammar)
    throw invalid_request("a custom grammar, json_schema or response_format cannot be combined with tools (use tool_choice 'none')");
  // Reasoning before the calls: a <think> block the prompt opened; harmony's analysis channel,
  // which its grammar allows whenever it is not the lazy one.
  const bool reason_first = choice != "auto" && (o.thinking_open || format == ToolFormat::Harmony);
  std::string gbnf;
  try {
    gbnf = tool_call_grammar(format, tools, name, parallel, reason_first, tojson_arguments);
  } catch (const Error& e) {
    throw invalid_request(std::string("tools: ") + e.what());
  }
  p.grammar.grammar = compile(gbnf, "tools");
  if (choice == "auto") {
    p.grammar.lazy = true;
    p.grammar.triggers = tool_call_triggers(format);
    p.grammar.think_first = o.thinking_open;
  }
  return o;
}

}  // namespace agentkv::server
