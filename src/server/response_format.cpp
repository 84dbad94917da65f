#include "server/response_format.h"

#include <random>

#include "server/logprobs.h"

namespace agentkv::server {

const char* finish_reason(StopType stop) {
  return stop == StopType::Eos || stop == StopType::Word ? "stop" : "length";
}

Json usage_json(const FinalResult& r) {
  return Json{
      {"completion_tokens", r.n_decoded},
      {"prompt_tokens", r.n_prompt},
      {"total_tokens", r.n_decoded + r.n_prompt},
      {"prompt_tokens_details", Json{{"cached_tokens", r.timings.cache_n}}},
  };
}

Json native_partial_json(const TokenEvent& t, const ResponseInfo& info) {
  Json tokens = info.params.return_tokens ? Json(t.tokens) : Json::array();
  Json j{
      {"index", info.index},
      {"content", t.text},
      {"tokens", tokens},
      {"stop", false},
      {"id_slot", t.id_slot},
      {"tokens_predicted", t.n_decoded},
      {"tokens_evaluated", t.n_prompt},
  };
  if (t.timings) j["timings"] = t.timings->to_json();
  if (info.params.n_probs > 0) j["completion_probabilities"] = token_probs_json(t.probs);
  return j;
}

Json native_final_json(const FinalResult& r, const ResponseInfo& info) {
  const bool streamed = info.params.stream;
  Json j{
      {"index", info.index},
      {"content", streamed ? std::string() : r.content},
      {"tokens", r.tokens},  // streamed: those no token event carried
      {"id_slot", r.id_slot},
      {"stop", true},
      {"model", info.model},
      {"tokens_predicted", r.n_decoded},
      {"tokens_evaluated", r.n_prompt},
      {"generation_settings", info.params.to_json()},
      {"prompt", info.prompt_text},
      {"has_new_line", r.has_new_line},
      {"truncated", r.truncated},
      {"stop_type", stop_type_name(r.stop)},
      {"stopping_word", r.stopping_word},
      {"tokens_cached", r.n_cached},
      {"timings", r.timings.to_json()},
  };
  if (info.params.n_probs > 0) j["completion_probabilities"] = token_probs_json(r.probs);
  return j;
}

namespace {
Json logprobs_json(const ResponseInfo& info, const std::vector<TokenProbs>& probs) {
  if (!info.params.with_logprobs) return nullptr;
  return Json{{"content", token_probs_json(probs)}};
}

Json oai_completion_object(const ResponseInfo& info, const std::string& text, const Json& finish,
                           const std::vector<TokenProbs>& probs) {
  return Json{
      {"choices", Json::array({Json{{"text", text}, {"index", info.index}, {"logprobs", logprobs_json(info, probs)}, {"finish_reason", finish}}})},
      {"created", info.created},
      {"model", info.model},
      {"system_fingerprint", info.fingerprint},
      {"object", "text_completion"},
      {"id", info.completion_id},
  };
}

Json chat_chunk(const ResponseInfo& info, const Json& delta, const Json& finish) {
  return Json{
      {"choices", Json::array({Json{{"finish_reason", finish}, {"index", info.index}, {"delta", delta}}})},
      {"created", info.created},
      {"id", info.completion_id},
      {"model", info.model},
      {"system_fingerprint", info.fingerprint},
      {"object", "chat.completion.chunk"},
  };
}
}  // namespace

Json prompt_progress_json(const PromptProgress& pp) {
  return Json{{"total", pp.total}, {"cache", pp.cache}, {"processed", pp.processed}, {"time_ms", pp.time_ms}};
}

Json progress_chunk(const TokenEvent& t, const ResponseInfo& info) {
  Json j;
  if (info.kind == ResponseKind::Native) {
    j = Json{{"index", info.index}, {"content", ""}, {"tokens", Json::array()}, {"stop", false}, {"id_slot", t.id_slot},
             {"tokens_predicted", 0}, {"tokens_evaluated", t.n_prompt}};
  } else {  // an OpenAI chunk with no choice, as the usage chunk
    j = chat_chunk(info, Json::object(), nullptr);
    j["choices"] = Json::array();
    if (info.kind == ResponseKind::OaiCompletion) j["object"] = "text_completion";
  }
  j["prompt_progress"] = prompt_progress_json(*t.progress);
  return j;
}

Json oai_completion_chunk_json(const TokenEvent& t, const ResponseInfo& info) {
  Json j = oai_completion_object(info, t.text, nullptr, t.probs);
  if (t.timings) j["timings"] = t.timings->to_json();
  return j;
}

Json oai_completion_final_json(const FinalResult& r, const ResponseInfo& info) {
  Json j = oai_completion_object(info, info.params.stream ? std::string() : r.content, finish_reason(r.stop), r.probs);
  j["usage"] = usage_json(r);
  j["timings"] = r.timings.to_json();
  if (info.params.verbose) j["__verbose"] = native_final_json(r, info);
  return j;
}

namespace {
// A finished answer with tool calls ends with "tool_calls" (unless it was cut off).
const char* chat_finish_reason(const FinalResult& r, bool has_calls) {
  if (has_calls && (r.stop == StopType::Eos || r.stop == StopType::Word)) return "tool_calls";
  return finish_reason(r.stop);
}
}  // namespace

std::vector<Json> oai_chat_token_chunks(const TokenEvent& t, const ResponseInfo& info, bool first, ChatStream& cs) {
  std::vector<Json> out;
  if (first) out.push_back(chat_chunk(info, Json{{"role", "assistant"}, {"content", nullptr}}, nullptr));
  cs.text += t.text;
  cs.pending_probs.insert(cs.pending_probs.end(), t.probs.begin(), t.probs.end());
  if (!t.text.empty()) {
    for (Json& delta : cs.diff.update(parse_chat_output(cs.text, info.chat, /*partial=*/true)))
      out.push_back(chat_chunk(info, delta, nullptr));
  }
  if (out.size() > (first ? 1u : 0u) && info.params.with_logprobs) {
    out.back()["choices"][0]["logprobs"] = logprobs_json(info, cs.pending_probs);
    cs.pending_probs.clear();
  }
  if (!out.empty() && t.timings) out.back()["timings"] = t.timings->to_json();
  return out;
}

std::vector<Json> oai_chat_final_chunks(const FinalResult& r, const ResponseInfo& info, ChatStream& cs) {
  std::vector<Json> out;
  cs.pending_probs.insert(cs.pending_probs.end(), r.probs.begin(), r.probs.end());
  for (Json& delta : cs.diff.update(parse_chat_output(r.content, info.chat, /*partial=*/false)))
    out.push_back(chat_chunk(info, delta, nullptr));
  out.push_back(chat_chunk(info, Json::object(), chat_finish_reason(r, !cs.diff.ids().empty())));
  if (info.params.with_logprobs && !cs.pending_probs.empty())
    out.back()["choices"][0]["logprobs"] = logprobs_json(info, cs.pending_probs);
  if (info.params.include_usage) {
    Json usage = chat_chunk(info, Json::object(), nullptr);
    usage["choices"] = Json::array();
    usage["usage"] = usage_json(r);
    out.push_back(usage);
  }
  out.back()["timings"] = r.timings.to_json();
  return out;
}

Json oai_chat_final_json(const FinalResult& r, const ResponseInfo& info) {
  const ChatMessage m = parse_chat_output(r.content, info.chat, /*partial=*/false);
  Json message{{"role", "assistant"}};
  message["content"] = m.content.empty() && !m.tool_calls.empty() ? Json(nullptr) : Json(m.content);
  if (!m.reasoning.empty()) message["reasoning_content"] = m.reasoning;
  if (!m.tool_calls.empty()) message["tool_calls"] = tool_calls_json(m.tool_calls);
  Json choice{{"finish_reason", chat_finish_reason(r, !m.tool_calls.empty())}, {"index", info.index}, {"message", message}};
  if (info.params.with_logprobs) choice["logprobs"] = logprobs_json(info, r.probs);
  Json j{
      {"choices", Json::array({choice})},
      {"created", info.created},
      {"model", info.model},
      {"system_fingerprint", info.fingerprint},
      {"object", "chat.completion"},
      {"usage", usage_json(r)},
      {"id", info.completion_id},
      {"timings", r.timings.to_json()},
  };
  if (info.params.verbose) j["__verbose"] = native_final_json(r, info);
  return j;
}

std::string make_completion_id(const std::string& prefix) {
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string id = prefix;
  for (int i = 0; i < 32; ++i) id += kAlphabet[pick(rng)];
  return id;
}

}  // namespace agentkv::server
