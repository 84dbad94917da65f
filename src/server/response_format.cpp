#include "server/response_format.h"

#include <random>

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
  Json tokens = Json::array();
  if (info.params.return_tokens && t.token >= 0) tokens.push_back(t.token);
  Json j{
      {"index", 0},
      {"content", t.text},
      {"tokens", tokens},
      {"stop", false},
      {"id_slot", t.id_slot},
      {"tokens_predicted", t.n_decoded},
      {"tokens_evaluated", t.n_prompt},
  };
  if (t.timings) j["timings"] = t.timings->to_json();
  return j;
}

Json native_final_json(const FinalResult& r, const ResponseInfo& info) {
  const bool streamed = info.params.stream;
  return Json{
      {"index", 0},
      {"content", streamed ? std::string() : r.content},
      {"tokens", streamed ? std::vector<Token>() : r.tokens},
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
}

namespace {
Json oai_completion_object(const ResponseInfo& info, const std::string& text, const Json& finish) {
  return Json{
      {"choices", Json::array({Json{{"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}}})},
      {"created", info.created},
      {"model", info.model},
      {"system_fingerprint", info.fingerprint},
      {"object", "text_completion"},
      {"id", info.completion_id},
  };
}

Json chat_chunk(const ResponseInfo& info, const Json& delta, const Json& finish) {
  return Json{
      {"choices", Json::array({Json{{"finish_reason", finish}, {"index", 0}, {"delta", delta}}})},
      {"created", info.created},
      {"id", info.completion_id},
      {"model", info.model},
      {"system_fingerprint", info.fingerprint},
      {"object", "chat.completion.chunk"},
  };
}
}  // namespace

Json oai_completion_chunk_json(const TokenEvent& t, const ResponseInfo& info) {
  Json j = oai_completion_object(info, t.text, nullptr);
  if (t.timings) j["timings"] = t.timings->to_json();
  return j;
}

Json oai_completion_final_json(const FinalResult& r, const ResponseInfo& info) {
  Json j = oai_completion_object(info, info.params.stream ? std::string() : r.content, finish_reason(r.stop));
  j["usage"] = usage_json(r);
  j["timings"] = r.timings.to_json();
  return j;
}

std::vector<Json> oai_chat_token_chunks(const TokenEvent& t, const ResponseInfo& info, bool first) {
  std::vector<Json> out;
  if (first) out.push_back(chat_chunk(info, Json{{"role", "assistant"}, {"content", nullptr}}, nullptr));
  if (!t.text.empty()) out.push_back(chat_chunk(info, Json{{"content", t.text}}, nullptr));
  if (!out.empty() && t.timings) out.back()["timings"] = t.timings->to_json();
  return out;
}

std::vector<Json> oai_chat_final_chunks(const FinalResult& r, const ResponseInfo& info) {
  std::vector<Json> out;
  out.push_back(chat_chunk(info, Json::object(), finish_reason(r.stop)));
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
  return Json{
      {"choices", Json::array({Json{
                      {"finish_reason", finish_reason(r.stop)},
                      {"index", 0},
                      {"message", Json{{"role", "assistant"}, {"content", r.content}}},
                  }})},
      {"created", info.created},
      {"model", info.model},
      {"system_fingerprint", info.fingerprint},
      {"object", "chat.completion"},
      {"usage", usage_json(r)},
      {"id", info.completion_id},
      {"timings", r.timings.to_json()},
  };
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
