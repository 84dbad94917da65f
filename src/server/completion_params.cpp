#include "server/completion_params.h"

#include "agentkv/evict_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "agentkv/error.h"
#include "agentkv/speculative.h"
#include "server/server_error.h"

namespace agentkv::server {

std::vector<PromptPart> parse_prompt(const Json& value, bool media_allowed) {
  std::vector<PromptPart> parts;
  auto add_item = [&](const Json& item) {
    if (item.is_string()) {
      parts.push_back({item.get<std::string>(), -1});
    } else if (item.is_number_integer()) {
      const int64_t id = item.get<int64_t>();
      if (id < 0 || id > INT32_MAX) throw invalid_request("prompt token id " + std::to_string(id) + " is out of range");
      parts.push_back({"", static_cast<Token>(id)});
    } else if (item.is_array()) {
      throw invalid_request("a prompt's items must be strings or token ids (a list of prompts holds no numbers)");
    } else {
      throw invalid_request("'prompt' items must be strings or token ids");
    }
  };
  if (value.is_object()) {
    // llama-server's multimodal prompt object: its text, with the media (prompt_media) where its
    // markers are.
    const bool media = value.contains("multimodal_data");
    if (media && !media_allowed)
      throw invalid_request("multimodal_data is read by /completion, /completions and /v1/completions only");
    const auto text = value.find("prompt_string");
    if (text == value.end() || !text->is_string() || value.size() != (media ? 2u : 1u))
      throw invalid_request("a 'prompt' object must be {\"prompt_string\": TEXT[, \"multimodal_data\": [BASE64, ...]]}");
    add_item(*text);
  } else if (value.is_string()) {
    add_item(value);
  } else if (value.is_array()) {
    for (const Json& item : value) add_item(item);
  } else {
    throw invalid_request("'prompt' must be a string or an array of token ids and strings");
  }
  return parts;
}

std::vector<Json> prompt_items(const Json& value) {
  const bool one_prompt = !value.is_array() || std::any_of(value.begin(), value.end(), [](const Json& item) {
    return item.is_number();
  }) || value.empty();
  if (one_prompt) return {value};
  std::vector<Json> items;
  for (const Json& item : value) {
    if (!item.is_string() && !item.is_array() && !item.is_object())
      throw invalid_request("each prompt of a 'prompt' list must be a string, an array of token ids or a prompt object");
    items.push_back(item);
  }
  return items;
}

std::vector<Token> tokenize_prompt(const Tokenizer& tok, const std::vector<PromptPart>& parts, bool add_special,
                                   bool parse_special) {
  std::vector<Token> out;
  bool first = true;
  for (const PromptPart& p : parts) {
    if (p.is_token()) {
      if (p.token >= tok.n_vocab())
        throw invalid_request("prompt token id " + std::to_string(p.token) + " is out of range [0, " +
                              std::to_string(tok.n_vocab()) + ")");
      out.push_back(p.token);
    } else {
      const auto ids = tok.encode(p.text, add_special && first, parse_special);
      out.insert(out.end(), ids.begin(), ids.end());
    }
    first = false;
  }
  return out;
}

Json CompletionParams::logit_bias_json() const {
  Json out = Json::array();  // llama-server's shape; a bias of -infinity is null
  for (const auto& [token, bias] : logit_bias)
    out.push_back(Json{{"token", token}, {"bias", std::isinf(bias) ? Json(nullptr) : Json(bias)}});
  return out;
}

Json CompletionParams::to_json() const {
  return Json{
      {"seed", sampling.seed},
      {"temperature", sampling.temperature},
      {"top_k", sampling.top_k},
      {"top_p", sampling.top_p},
      {"min_p", sampling.min_p},
      {"repeat_last_n", sampling.repeat_last_n},
      {"repeat_penalty", sampling.repeat_penalty},
      {"presence_penalty", sampling.presence_penalty},
      {"frequency_penalty", sampling.frequency_penalty},
      {"stop", stop},
      {"max_tokens", n_predict},
      {"n_predict", n_predict},
      {"n_keep", n_keep},
      {"n_discard", n_discard},
      {"kv_evict", kv_evict},
      {"stream", stream},
      {"cache_prompt", cache_prompt},
      {"id_slot", id_slot},
      {"samplers", Json::array({"penalties", "top_k", "top_p", "min_p", "temperature"})},
      {"timings_per_token", timings_per_token},
      {"n_probs", n_probs},
      {"post_sampling_probs", post_sampling_probs},
      {"ignore_eos", ignore_eos},
      {"logit_bias", logit_bias_json()},
      {"grammar", grammar.grammar ? grammar.grammar->source : std::string()},
      {"grammar_lazy", grammar.lazy},
      {"grammar_triggers", grammar.triggers},
      {"speculative.type", spec_n_max > 0 ? spec_sources.name() : "none"},
      {"speculative.n_max", spec_n_max},
      {"speculative.n_min", spec_n_min},
      {"speculative.p_min", spec_p_min},
      {"speculative.adaptive", spec_adaptive},
  };
}

std::vector<std::pair<Token, float>> parse_logit_bias(const Json& value, int64_t n_vocab, const Tokenizer* tok) {
  // The tokens a key names: an id (a number, or digits in an object key), or a text's tokens.
  auto tokens_of = [n_vocab, tok](const Json& key, bool digits_are_ids) -> std::vector<Token> {
    int64_t id = -1;
    if (key.is_number_integer()) {
      id = key.get<int64_t>();
    } else if (key.is_string()) {
      const std::string& s = key.get_ref<const std::string&>();
      const size_t sign = !s.empty() && s[0] == '-' ? 1 : 0;  // "-1" is an id (out of range), as strtol reads it
      const bool digits = s.size() > sign && s.size() <= 10 + sign && s.find_first_not_of("0123456789", sign) == std::string::npos;
      if (!(digits && digits_are_ids)) {
        if (!tok) throw invalid_request("logit_bias: '" + s + "' is not a token id");
        if (s.size() > 4096) throw invalid_request("logit_bias: a token text is longer than 4096 bytes");
        std::vector<Token> ids = tok->encode(s, /*add_special=*/false, /*parse_special=*/false);
        if (ids.empty()) throw invalid_request("logit_bias: the text '" + s + "' has no tokens");
        return ids;
      }
      id = std::stoll(s);
    } else {
      throw invalid_request("logit_bias: keys must be token ids or texts");
    }
    if (id < 0 || id >= n_vocab)
      throw invalid_request("logit_bias: token id " + std::to_string(id) + " is out of range [0, " +
                            std::to_string(n_vocab) + ")");
    return {static_cast<Token>(id)};
  };
  auto bias_value = [](const Json& v) -> float {
    if (v.is_boolean() && !v.get<bool>()) return -std::numeric_limits<float>::infinity();
    const float bias = v.is_number() ? static_cast<float>(v.get<double>()) : NAN;
    if (!std::isfinite(bias)) throw invalid_request("logit_bias: a bias must be a finite number or false");
    return bias;
  };
  std::vector<std::pair<Token, float>> out;
  if (value.is_null()) return out;
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      const float bias = bias_value(it.value());
      for (Token t : tokens_of(it.key(), /*digits_are_ids=*/true)) out.emplace_back(t, bias);
    }
  } else if (value.is_array()) {
    for (const Json& item : value) {
      if (!item.is_array() || item.size() != 2)
        throw invalid_request("logit_bias: array items must be [token id or text, bias]");
      const float bias = bias_value(item[1]);
      for (Token t : tokens_of(item[0], /*digits_are_ids=*/false)) out.emplace_back(t, bias);
    }
  } else {
    throw invalid_request("field 'logit_bias' must be an object or an array");
  }
  return out;
}

namespace {

// llama-server's flat "speculative.*" fields (it reads n_max / n_min / type when built with them).
void read_speculative(const Json& body, const CompletionParams& defaults, CompletionParams& p) {
  const int32_t n_max_default = defaults.spec_n_max > 0 ? defaults.spec_n_max : kDefaultDraftMax;
  const std::string type = read_string(body, "speculative.type", defaults.spec_n_max > 0 ? defaults.spec_sources.name() : "none");
  try {
    p.spec_sources = parse_spec_types(type);
  } catch (const Error& e) {
    throw invalid_request("speculative.type: " + std::string(e.what()));
  }
  // The draft model is the server's: a request may use it when the server drafts with it.
  if (p.spec_sources.draft_model && !defaults.spec_sources.draft_model)
    throw invalid_request("speculative.type '" + type + "': this server has no draft model (start it with -md FILE)");
  p.spec_n_max = static_cast<int32_t>(read_int(body, "speculative.n_max", n_max_default, 0, kMaxDraft));
  if (!p.spec_sources.any()) p.spec_n_max = 0;
  p.spec_n_min = static_cast<int32_t>(read_int(body, "speculative.n_min", defaults.spec_n_min, 0, kMaxDraft));
  p.spec_adaptive = read_bool(body, "speculative.adaptive", defaults.spec_adaptive);
  const double p_min = read_number(body, "speculative.p_min", defaults.spec_p_min);
  if (!(p_min >= 0.0 && p_min <= 1.0)) throw invalid_request("speculative.p_min must be in [0, 1]");
  p.spec_p_min = static_cast<float>(p_min);
  if (p.spec_n_min > p.spec_n_max && p.spec_n_max > 0)
    throw invalid_request("speculative.n_min (" + std::to_string(p.spec_n_min) + ") is above speculative.n_max (" +
                          std::to_string(p.spec_n_max) + ")");
}

}  // namespace

std::string SpecSources::name() const {
  if (ngram && draft_model) return "ngram-simple,draft-simple";
  return ngram ? "ngram-simple" : draft_model ? "draft-simple" : "none";
}

SpecSources parse_spec_types(const std::string& names) {
  SpecSources s;
  size_t start = 0;
  while (start <= names.size()) {
    const size_t comma = std::min(names.find(',', start), names.size());
    const std::string name = names.substr(start, comma - start);
    start = comma + 1;
    if (name == "ngram-simple" || name == "ngram" || name == "ngram-map-k" || name == "ngram-map-k4v" ||
        name == "ngram-mod" || name == "ngram-cache")
      s.ngram = true;
    else if (name == "draft-simple")
      s.draft_model = true;
    else if (name != "none")
      throw Error("'" + name + "': agentkv drafts with none, the n-gram kinds (ngram-simple, ngram-map-k, ngram-map-k4v, "
                  "ngram-mod, ngram-cache: one lookup) and draft-simple (a draft model, -md); draft-mtp, eagle3 and "
                  "the others are not served yet");
  }
  return s;
}

CompletionParams parse_completion_params(const Json& body, int n_slots, int64_t n_vocab, const CompletionParams& defaults,
                                         const Tokenizer* tok) {
  CompletionParams p;
  p.sampling = defaults.sampling;
  SamplerParams& s = p.sampling;
  s.temperature = static_cast<float>(read_number(body, "temperature", s.temperature));
  s.top_k = static_cast<int32_t>(read_int(body, "top_k", s.top_k));
  s.top_p = static_cast<float>(read_number(body, "top_p", s.top_p));
  s.min_p = static_cast<float>(read_number(body, "min_p", s.min_p));
  s.repeat_penalty = static_cast<float>(read_number(body, "repeat_penalty", s.repeat_penalty));
  s.repeat_last_n = static_cast<int32_t>(read_int(body, "repeat_last_n", s.repeat_last_n, -1));
  s.presence_penalty = static_cast<float>(read_number(body, "presence_penalty", s.presence_penalty));
  s.frequency_penalty = static_cast<float>(read_number(body, "frequency_penalty", s.frequency_penalty));
  // -1 and 0xFFFFFFFF both mean "random", as in llama.cpp.
  const int64_t default_seed = defaults.sampling.seed == kRandomSeed ? -1 : static_cast<int64_t>(defaults.sampling.seed);
  const int64_t seed = read_int(body, "seed", default_seed, -1, UINT32_MAX);
  s.seed = seed < 0 ? kRandomSeed : static_cast<uint32_t>(seed);

  // n_predict wins over the OpenAI names, as in llama-server.
  const int64_t max_tokens = read_int(body, "max_tokens", defaults.n_predict, -1);
  const int64_t max_completion_tokens = read_int(body, "max_completion_tokens", max_tokens, -1);
  p.n_predict = static_cast<int32_t>(read_int(body, "n_predict", max_completion_tokens, -1));

  p.n_keep = static_cast<int32_t>(read_int(body, "n_keep", 0, -1));
  p.n_discard = static_cast<int32_t>(read_int(body, "n_discard", 0, 0));
  p.kv_evict = read_string(body, "kv_evict", "");
  if (!p.kv_evict.empty() && !parse_evict_policy(p.kv_evict))
    throw invalid_request("unknown kv_evict '" + p.kv_evict + "': one of " + kEvictPolicyNames);
  p.stop = read_string_list(body, "stop");
  std::erase_if(p.stop, [](const std::string& w) { return w.empty(); });
  p.cache_prompt = read_bool(body, "cache_prompt", true);
  // Fake-prefix timing mode: the first n_fake_cached positions exist as metadata only, so the
  // prompt cannot come from (or go to) a real cache; an explicit cache_prompt=true contradicts it.
  p.n_fake_cached = static_cast<int32_t>(read_int(body, "n_fake_cached", 0, 0));
  if (p.n_fake_cached > 0) {
    if (has_field(body, "cache_prompt") && p.cache_prompt)
      throw invalid_request("n_fake_cached implies cache_prompt=false: do not combine it with cache_prompt=true");
    p.cache_prompt = false;
  }
  p.id_slot = static_cast<int32_t>(read_int(body, "id_slot", -1));
  if (p.id_slot < -1 || p.id_slot >= n_slots)
    throw invalid_request("id_slot " + std::to_string(p.id_slot) + " does not exist: the server has " +
                          std::to_string(n_slots) + " slots (0.." + std::to_string(n_slots - 1) + ")");
  p.session_id = read_string(body, "session_id", "");
  p.cache_salt = read_string(body, "cache_salt", "");
  p.stream = read_bool(body, "stream", false);
  p.include_usage = read_bool(read_object(body, "stream_options"), "include_usage", false);
  p.return_tokens = read_bool(body, "return_tokens", false);
  p.timings_per_token = read_bool(body, "timings_per_token", false);
  p.verbose = read_bool(body, "verbose", defaults.verbose);
  p.return_progress = read_bool(body, "return_progress", false);
  p.ignore_eos = read_bool(body, "ignore_eos", false);
  if (has_field(body, "response_fields")) {
    const Json& f = body.at("response_fields");
    if (!f.is_array() || !std::all_of(f.begin(), f.end(), [](const Json& x) { return x.is_string(); }))
      throw invalid_request("field 'response_fields' must be an array of strings");
    for (const Json& x : f) p.response_fields.push_back(x.get<std::string>());
  }
  if (body.contains("logit_bias")) p.logit_bias = parse_logit_bias(body.at("logit_bias"), n_vocab, tok);
  read_speculative(body, defaults, p);

  try {
    Sampler check(s);  // the sampler's own validation, reported as a bad request
  } catch (const Error& e) {
    throw invalid_request(e.what());
  }
  return p;
}

}  // namespace agentkv::server
