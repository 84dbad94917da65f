// The server's pure pieces: request parsing (llama-server's field names and defaults, strict
// types), prompt forms, error bodies, response shapes, timings, metrics text and UTF-8 checks.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.h"
#include "server/completion_params.h"
#include "server/json_fields.h"
#include "server/metrics.h"
#include "server/response_format.h"
#include "server/server_error.h"
#include "server/task.h"
#include "server/utf8.h"
#include "fixtures.h"

namespace agentkv::server {
namespace {

const std::string kFixtures = AGENTKV_FIXTURES_DIR;

// Runs `fn` and returns the HttpError it throws (fails the test when it throws nothing).
template <class Fn>
HttpError error_of(Fn fn) {
  try {
    fn();
  } catch (const HttpError& e) {
    return e;
  }
  ADD_FAILURE() << "no HttpError thrown";
  return HttpError(ErrorType::Server, "none");
}

std::vector<std::string> keys_of(const Json& j) {
  std::vector<std::string> out;
  for (const auto& [k, v] : j.items()) out.push_back(k);
  return out;
}

TEST(ServerJson, MalformedAndNonObjectBodiesAreInvalidRequests) {
  EXPECT_EQ(error_of([] { parse_body_object("{\"prompt\": "); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([] { parse_body_object("[1, 2]"); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([] { parse_body_object(""); }).type(), ErrorType::InvalidRequest);
  EXPECT_TRUE(parse_body_object(" {\"a\": 1} ").is_object());
}

TEST(ServerJson, FieldReadersAreStrictAndNameTheField) {
  const Json body = Json::parse(R"({"i": 3, "f": 2.0, "half": 1.5, "s": "x", "b": true, "n": null, "big": 1e30})");
  EXPECT_EQ(read_int(body, "i", 0), 3);
  EXPECT_EQ(read_int(body, "f", 0), 2);  // an integral float is accepted
  EXPECT_EQ(read_int(body, "n", 7), 7);  // null means absent
  EXPECT_EQ(read_int(body, "missing", 9), 9);
  const HttpError e = error_of([&] { read_int(body, "half", 0); });
  EXPECT_NE(std::string(e.what()).find("'half'"), std::string::npos);
  EXPECT_EQ(error_of([&] { read_int(body, "s", 0); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([&] { read_int(body, "big", 0); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([&] { read_int(body, "i", 0, 5, 10); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([&] { read_bool(body, "i", false); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([&] { read_number(body, "s", 0.0); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([&] { read_string(body, "b", ""); }).type(), ErrorType::InvalidRequest);
  EXPECT_TRUE(read_bool(body, "b", false));
  EXPECT_EQ(read_string(body, "s", ""), "x");
}

TEST(ServerParams, DefaultsAreLlamaServers) {
  // llama.cpp common_params_sampling defaults, which llama-server applies to every request.
  const CompletionParams p = parse_completion_params(Json::object(), 4);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.8f);
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.95f);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.05f);
  EXPECT_EQ(p.sampling.repeat_last_n, 64);
  EXPECT_FLOAT_EQ(p.sampling.repeat_penalty, 1.0f);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 0.0f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, 0.0f);
  EXPECT_EQ(p.sampling.seed, kRandomSeed);
  EXPECT_EQ(p.n_predict, -1);
  EXPECT_TRUE(p.cache_prompt);
  EXPECT_EQ(p.id_slot, -1);
  EXPECT_FALSE(p.stream);
  EXPECT_TRUE(p.stop.empty());
}

TEST(ServerParams, ReadsEveryField) {
  const Json body = Json::parse(R"({
    "temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1, "repeat_penalty": 1.3, "repeat_last_n": -1,
    "presence_penalty": 0.25, "frequency_penalty": -0.5, "seed": 42, "n_predict": 7, "stop": ["a", "", "bc"],
    "cache_prompt": false, "id_slot": 3, "session_id": "s1", "stream": true,
    "stream_options": {"include_usage": true}, "return_tokens": true, "timings_per_token": true})");
  const CompletionParams p = parse_completion_params(body, 4);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.0f);
  EXPECT_EQ(p.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.sampling.repeat_penalty, 1.3f);
  EXPECT_EQ(p.sampling.repeat_last_n, -1);
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(p.sampling.seed, 42u);
  EXPECT_EQ(p.n_predict, 7);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));  // empty stop strings are dropped
  EXPECT_FALSE(p.cache_prompt);
  EXPECT_EQ(p.id_slot, 3);
  EXPECT_EQ(p.session_id, "s1");
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_TRUE(p.return_tokens);
  EXPECT_TRUE(p.timings_per_token);
}

TEST(ServerParams, PredictionLimitNamesTakePrecedenceAsInLlamaServer) {
  EXPECT_EQ(parse_completion_params(Json::parse(R"({"max_tokens": 5})"), 1).n_predict, 5);
  EXPECT_EQ(parse_completion_params(Json::parse(R"({"max_tokens": 5, "max_completion_tokens": 6})"), 1).n_predict, 6);
  EXPECT_EQ(parse_completion_params(Json::parse(R"({"max_tokens": 5, "n_predict": 4})"), 1).n_predict, 4);
  EXPECT_EQ(parse_completion_params(Json::parse(R"({"stop": "###"})"), 1).stop, std::vector<std::string>{"###"});
  EXPECT_EQ(parse_completion_params(Json::parse(R"({"seed": -1})"), 1).sampling.seed, kRandomSeed);
}

TEST(ServerParams, RefusesBadValues) {
  auto refused = [](const char* body) {
    return error_of([&] { parse_completion_params(Json::parse(body), 4); }).type() == ErrorType::InvalidRequest;
  };
  EXPECT_TRUE(refused(R"({"temperature": "hot"})"));
  EXPECT_TRUE(refused(R"({"n_predict": 2.5})"));
  EXPECT_TRUE(refused(R"({"n_predict": -2})"));
  EXPECT_TRUE(refused(R"({"stop": [1]})"));
  EXPECT_TRUE(refused(R"({"stop": 3})"));
  EXPECT_TRUE(refused(R"({"cache_prompt": 1})"));
  EXPECT_TRUE(refused(R"({"id_slot": 4})"));
  EXPECT_TRUE(refused(R"({"id_slot": -2})"));
  EXPECT_TRUE(refused(R"({"repeat_penalty": 0})"));
  EXPECT_TRUE(refused(R"({"repeat_last_n": -2})"));
  EXPECT_TRUE(refused(R"({"seed": 4294967296})"));
  EXPECT_TRUE(refused(R"({"stream_options": true})"));
  EXPECT_TRUE(refused(R"({"session_id": 5})"));
  const HttpError e = error_of([] { parse_completion_params(Json::parse(R"({"id_slot": 9})"), 4); });
  EXPECT_NE(std::string(e.what()).find("id_slot 9"), std::string::npos);
}

TEST(ServerPrompt, AcceptsStringTokenIdsAndMixedArrays) {
  auto parts = parse_prompt(Json("hello"));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_FALSE(parts[0].is_token());
  parts = parse_prompt(Json::parse(R"([1, "x", 2])"));
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].token, 1);
  EXPECT_EQ(parts[1].text, "x");
  EXPECT_EQ(parts[2].token, 2);
  EXPECT_EQ(error_of([] { parse_prompt(Json::parse(R"([[1, 2], [3]])")); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([] { parse_prompt(Json::parse(R"([-1])")); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([] { parse_prompt(Json::parse(R"([true])")); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([] { parse_prompt(Json(3)); }).type(), ErrorType::InvalidRequest);
}

// Each prompt of a `prompt` value, parsed (what the completion route does per item).
std::vector<std::vector<PromptPart>> parse_prompts(const Json& value) {
  std::vector<std::vector<PromptPart>> prompts;
  for (const Json& item : prompt_items(value)) prompts.push_back(parse_prompt(item));
  return prompts;
}

// llama-server's rule: one prompt unless the array holds no token id at all.
TEST(ServerPrompt, ListsOfPromptsAreArraysWithoutTokenIds) {
  EXPECT_EQ(parse_prompts(Json("a")).size(), 1u);
  EXPECT_EQ(parse_prompts(Json::parse(R"({"prompt_string": "a"})")).size(), 1u);
  EXPECT_EQ(parse_prompts(Json::parse(R"([1, "x", 2])")).size(), 1u);  // ids with text between them
  EXPECT_EQ(parse_prompts(Json::parse(R"([1, 2])")).size(), 1u);
  const auto lists = parse_prompts(Json::parse(R"([[1, 2], "b", {"prompt_string": "c"}, [3, "d"]])"));
  ASSERT_EQ(lists.size(), 4u);
  EXPECT_EQ(lists[0].size(), 2u);
  EXPECT_EQ(lists[1][0].text, "b");
  EXPECT_EQ(lists[2][0].text, "c");
  EXPECT_EQ(lists[3][1].text, "d");
  EXPECT_EQ(parse_prompts(Json::parse(R"(["a", "b"])")).size(), 2u);
  EXPECT_EQ(error_of([] { parse_prompts(Json::parse(R"([[1], true])")); }).type(), ErrorType::InvalidRequest);
  EXPECT_EQ(error_of([] { parse_prompts(Json::parse(R"([[[1]]])")); }).type(), ErrorType::InvalidRequest);
}

TEST(ServerPrompt, TokenizesLikeLlamaCpp) {
  AGENTKV_NEEDS_FIXTURES();
  // llama.cpp's tokenization of the first reference prompt (fixtures/reference).
  auto model = Model::load(kFixtures + "/models/qwen3-micro.gguf");
  std::ifstream in(kFixtures + "/reference/qwen3-micro.json");
  ASSERT_TRUE(in.good());
  const Json ref = Json::parse(in);
  const Json& c = ref["cases"][0];
  const std::vector<Token> expected = c["prompt_tokens"].get<std::vector<Token>>();
  const auto& tok = model->tokenizer();
  EXPECT_EQ(tokenize_prompt(tok, parse_prompt(c["prompt"]), true), expected);
  // Mixed: ids pass through, text between them is tokenized on its own.
  Json mixed = Json::array({expected[0], expected[1]});
  EXPECT_EQ(tokenize_prompt(tok, parse_prompt(mixed), true), (std::vector<Token>{expected[0], expected[1]}));
  EXPECT_EQ(error_of([&] { tokenize_prompt(tok, parse_prompt(Json::array({tok.n_vocab()})), true); }).type(),
            ErrorType::InvalidRequest);
}

TEST(ServerErrors, BodiesHaveLlamaServersShape) {
  const Json body = error_body(HttpError(ErrorType::InvalidRequest, "bad"));
  EXPECT_EQ(body.dump(), R"({"error":{"code":400,"message":"bad","type":"invalid_request_error"}})");
  EXPECT_EQ(error_body(HttpError(ErrorType::Authentication, "Invalid API Key")).dump(),
            R"({"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}})");
  EXPECT_EQ(error_body(HttpError(ErrorType::Unavailable, "Loading model")).dump(),
            R"({"error":{"code":503,"message":"Loading model","type":"unavailable_error"}})");
  const Json ctx = error_body(HttpError(ErrorType::ExceedContextSize, "too long", Json{{"n_prompt_tokens", 10}, {"n_ctx", 8}}));
  EXPECT_EQ(ctx["error"]["code"], 400);
  EXPECT_EQ(ctx["error"]["type"], "exceed_context_size_error");
  EXPECT_EQ(ctx["error"]["n_prompt_tokens"], 10);
  EXPECT_EQ(ctx["error"]["n_ctx"], 8);
  EXPECT_EQ(http_status(ErrorType::NotFound), 404);
  EXPECT_EQ(http_status(ErrorType::NotSupported), 501);
  EXPECT_EQ(http_status(ErrorType::PayloadTooLarge), 413);
}

TEST(ServerTimings, FieldsAndRatesAreLlamaServers) {
  Timings t;
  t.cache_n = 5;
  t.prompt_n = 4;
  t.prompt_ms = 8.0;
  t.predicted_n = 10;
  t.predicted_ms = 20.0;
  const Json j = t.to_json();
  EXPECT_EQ(keys_of(j), (std::vector<std::string>{"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms",
                                                  "prompt_per_second", "predicted_n", "predicted_ms",
                                                  "predicted_per_token_ms", "predicted_per_second"}));
  EXPECT_DOUBLE_EQ(j["prompt_per_token_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["prompt_per_second"].get<double>(), 500.0);
  EXPECT_DOUBLE_EQ(j["predicted_per_token_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["predicted_per_second"].get<double>(), 500.0);
  const Json empty = Timings{}.to_json();  // no division by zero: rates are 0, not null
  EXPECT_TRUE(empty["prompt_per_token_ms"].is_number());
  EXPECT_TRUE(empty["predicted_per_second"].is_number());
}

FinalResult sample_result() {
  FinalResult r;
  r.content = "hi";
  r.tokens = {7, 8};
  r.stop = StopType::Word;
  r.stopping_word = "###";
  r.id_slot = 2;
  r.n_prompt = 11;
  r.n_decoded = 2;
  r.n_cached = 12;
  r.timings.cache_n = 6;
  r.timings.prompt_n = 5;
  return r;
}

TEST(ServerResponses, NativeFinalHasLlamaServersFields) {
  ResponseInfo info;
  info.model = "m";
  info.prompt_text = "p";
  const Json j = native_final_json(sample_result(), info);
  EXPECT_EQ(keys_of(j), (std::vector<std::string>{"index", "content", "tokens", "id_slot", "stop", "model",
                                                  "tokens_predicted", "tokens_evaluated", "generation_settings",
                                                  "prompt", "has_new_line", "truncated", "stop_type", "stopping_word",
                                                  "tokens_cached", "timings"}));
  EXPECT_EQ(j["content"], "hi");
  EXPECT_EQ(j["stop_type"], "word");
  EXPECT_EQ(j["tokens_evaluated"], 11);
  EXPECT_EQ(j["tokens_cached"], 12);
  info.params.stream = true;  // streamed: the content already went out in the chunks
  const Json s = native_final_json(sample_result(), info);
  EXPECT_EQ(s["content"], "");
  // The tokens are those no chunk carried: the scheduler hands a streamed final only those.
  EXPECT_EQ(s["tokens"], j["tokens"]);
}

TEST(ServerResponses, OpenAiShapes) {
  ResponseInfo info;
  info.kind = ResponseKind::OaiChat;
  info.model = "m";
  info.completion_id = "chatcmpl-x";
  const FinalResult r = sample_result();
  const Json usage = usage_json(r);
  EXPECT_EQ(usage["completion_tokens"], 2);
  EXPECT_EQ(usage["prompt_tokens"], 11);
  EXPECT_EQ(usage["total_tokens"], 13);
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], 6);

  const Json chat = oai_chat_final_json(r, info);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(chat["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(chat.contains("timings"));

  TokenEvent t;
  t.text = "a";
  ChatStream cs;
  auto first = oai_chat_token_chunks(t, info, true, cs);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first[0]["choices"][0]["delta"]["content"].is_null());
  EXPECT_EQ(first[1]["choices"][0]["delta"]["content"], "a");
  EXPECT_EQ(first[1]["object"], "chat.completion.chunk");
  EXPECT_EQ(oai_chat_token_chunks(t, info, false, cs).size(), 1u);

  FinalResult streamed = r;
  streamed.content = "aa";  // what the two chunks sent
  auto ends = oai_chat_final_chunks(streamed, info, cs);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(ends[0]["choices"][0]["delta"].empty());
  info.params.include_usage = true;
  ends = oai_chat_final_chunks(streamed, info, cs);
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_TRUE(ends[1]["choices"].empty());
  EXPECT_EQ(ends[1]["usage"]["total_tokens"], 13);
  EXPECT_TRUE(ends[1].contains("timings"));

  FinalResult limited = r;
  limited.stop = StopType::Limit;
  info.kind = ResponseKind::OaiCompletion;
  const Json cmpl = oai_completion_final_json(limited, info);
  EXPECT_EQ(cmpl["object"], "text_completion");
  EXPECT_EQ(cmpl["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(cmpl["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(make_completion_id("cmpl-").size(), 5u + 32u);
}

TEST(ServerMetrics, PrometheusTextUsesLlamaCppNames) {
  MetricsSnapshot m;
  m.prompt_tokens_total = 12;
  m.prompt_ms_total = 2000.0;
  m.n_decode_total = 4;
  m.n_busy_slots_total = 6;
  const std::string text = prometheus_text(m);
  EXPECT_NE(text.find("# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 12\n"), std::string::npos);
  EXPECT_NE(text.find("llamacpp:prompt_seconds_total 2\n"), std::string::npos);
  EXPECT_NE(text.find("llamacpp:prompt_tokens_seconds 6\n"), std::string::npos);
  EXPECT_NE(text.find("llamacpp:n_busy_slots_per_decode 1.5\n"), std::string::npos);
  for (const char* name : {"tokens_predicted_total", "tokens_predicted_seconds_total", "n_decode_total", "n_tokens_max",
                           "predicted_tokens_seconds", "requests_processing", "requests_deferred"})
    EXPECT_NE(text.find(std::string("llamacpp:") + name + " "), std::string::npos) << name;
}

TEST(ServerUtf8, Validity) {
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xf0\x9f\xa6\x99"));
  EXPECT_FALSE(is_valid_utf8("\xc3"));              // cut inside a character
  EXPECT_FALSE(is_valid_utf8("\xf0\x9f\xa6"));
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\x80"));
}

}  // namespace
}  // namespace agentkv::server
