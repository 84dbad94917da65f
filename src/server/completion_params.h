// The generation fields of a completion request (/completion and the OpenAI endpoints), with
// llama-server's names and defaults, and the prompt forms llama-server accepts.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "agentkv/sampling.h"
#include "server/grammar_run.h"
#include "server/json_fields.h"
#include "agentkv/tokenizer.h"

namespace agentkv::server {

// One part of a prompt: text to tokenize, or a token id. A prompt is a string, an array of
// token ids, or an array mixing strings and ids (llama-server's "mixed" prompt).
struct PromptPart {
  std::string text;
  Token token = -1;  // >= 0: this part is a token id
  bool is_token() const { return token >= 0; }
};

// One prompt. Throws invalid_request for anything else (numbers that are not token ids, nested
// arrays: a list of prompts is prompt_items'). media_allowed: a {"prompt_string", "multimodal_data"}
// object is one (its text; the media are prompt_media's), else that is a 400.
std::vector<PromptPart> parse_prompt(const Json& value, bool media_allowed = false);
// `prompt` as one or several prompts (llama-server's rule): a string, a {"prompt_string"} object,
// or an array of token ids (strings mixed in) is one prompt; any other array is a list of prompts,
// each of those forms; one item per prompt (each parse_prompt's).
std::vector<Json> prompt_items(const Json& value);

// Tokenizes the text parts (BOS only before the first part, when add_special and the vocabulary
// asks for it) and checks every id against the vocabulary.
std::vector<Token> tokenize_prompt(const Tokenizer& tok, const std::vector<PromptPart>& parts, bool add_special,
                                   bool parse_special = true);

constexpr uint32_t kRandomSeed = 0xFFFFFFFFu;  // llama.cpp's LLAMA_DEFAULT_SEED: draw a random seed

// Where a request's drafts come from (speculative decoding, docs/speculative.md).
struct SpecSources {
  bool ngram = false;        // n-gram lookup in the context (then the namespace's other sequences)
  bool draft_model = false;  // the server's draft model (-md), when the lookup finds none
  bool any() const { return ngram || draft_model; }
  std::string name() const;  // llama.cpp's names, comma-separated; "none"
};

struct CompletionParams {
  CompletionParams() { sampling.seed = kRandomSeed; }

  SamplerParams sampling;            // seed == kRandomSeed until the scheduler draws one
  int32_t n_predict = -1;            // -1: until end of generation or the context is full
  // Context shift (--context-shift): the prompt tokens kept at the front (-1: the whole prompt;
  // BOS is added when the model uses one) and how many after them go (0: half of the rest).
  int32_t n_keep = 0;
  int32_t n_discard = 0;
  std::string kv_evict;              // which positions a shift drops (agentkv/retention.h); empty: the server's --kv-evict
  std::vector<std::string> stop;
  bool cache_prompt = true;          // reuse the slot's cached prefix
  int32_t n_fake_cached = 0;         // > 0: the first n positions are a metadata-only fake prefix
  int32_t id_slot = -1;              // -1: the server chooses
  std::string session_id;            // binds a conversation to a slot (agentkv extension)
  std::string cache_salt;            // vLLM's cache_salt: prompts share cached pages only under the same salt
  bool stream = false;
  bool include_usage = false;        // OpenAI stream_options.include_usage
  bool return_tokens = false;        // fill "tokens" in native responses
  bool timings_per_token = false;    // timings on every streamed chunk
  bool ignore_eos = false;           // every end-of-generation token gets a bias of -infinity
  std::vector<std::string> response_fields;  // native responses: only these ("a/b" = nested) fields
  bool return_progress = false;      // streams: prompt_progress events while the prompt is read
  bool verbose = false;              // OpenAI responses carry "__verbose": the native response (llama-server)
  // Added to a token's logit before sampling (llama-server's logit_bias; -infinity: never).
  std::vector<std::pair<Token, float>> logit_bias;
  // Constrained decoding (grammar, json_schema, response_format, tools; agent_request.h).
  GrammarSettings grammar;
  // Control tokens whose text the output shows and the grammar sees (the tool format's markers,
  // when tools are parsed: llama.cpp's preserved_tokens); sorted.
  std::vector<Token> kept_control_tokens;
  // Probabilities of the n_probs most likely tokens at each generated token (n_probs,
  // top_logprobs); with_logprobs: the sampled token's own log-probability even when n_probs = 0.
  int32_t n_probs = 0;
  bool with_logprobs = false;
  bool post_sampling_probs = false;  // probabilities of the distribution drawn from, after the filters
  // Reasoning budget (server/reasoning_budget.h): -1 none; N >= 0 tokens inside the reasoning
  // block, then its end is forced. The block's tags come from the chat format (chat requests;
  // empty: no block known, no budget); reasoning_open: the prompt opened the block.
  int32_t reasoning_budget = -1;
  std::string reasoning_start, reasoning_end;
  bool reasoning_open = false;
  // Speculative decoding (docs/speculative.md): drafts from spec_sources, at most spec_n_max per
  // step (0: off), none when fewer than spec_n_min are found; a draft model's drafts end at its
  // first token less than spec_p_min probable. The server's --spec-type / --draft-max / --draft-min
  // / --draft-p-min give the defaults; "speculative.type", "speculative.n_max", "speculative.n_min"
  // and "speculative.p_min" override them per request.
  int32_t spec_n_max = 0;
  int32_t spec_n_min = 0;
  SpecSources spec_sources;
  float spec_p_min = 0.75f;
  // "speculative.adaptive" (agentkv): true, the length that pays on this machine and text
  // (server/draft_policy.h); false, n_max whenever the lookup finds that many (tests, benchmarks).
  bool spec_adaptive = true;

  // The "generation_settings" / slot "params" object (llama-server's field names).
  Json to_json() const;
  Json logit_bias_json() const;
};

// Drafts per step when speculation is on and no n_max is given (llama-server's --spec-draft-n-max).
inline constexpr int32_t kDefaultDraftMax = 64;
// llama.cpp's --spec-type / speculative.type value, comma-separated names: "none"; the n-gram
// kinds (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache: one lookup in the
// sequence's context and its namespace's other sequences serves them all); "draft-simple" (the
// -md draft model). Throws agentkv::Error naming a kind agentkv does not serve.
SpecSources parse_spec_types(const std::string& names);

// Reads the fields above from a request body. n_slots bounds id_slot, n_vocab the token ids of
// logit_bias; `tok` tokenizes logit_bias keys given as text (none: such keys are a 400). Sampling values the sampler would refuse (repeat_penalty <= 0, repeat_last_n < -1)
// are invalid_request errors. Absent fields take the server's defaults: `defaults.sampling`
// (--temp, --seed) and `defaults.n_predict` (--n-predict).
CompletionParams parse_completion_params(const Json& body, int n_slots, int64_t n_vocab = INT32_MAX,
                                         const CompletionParams& defaults = CompletionParams{},
                                         const Tokenizer* tok = nullptr);

// logit_bias as llama-server and OpenAI send it: {"token id": bias} or [[token id, bias], ...]; a
// bias of false bans the token. A key that is text ({"hello": -5}, [["hello", -5]]) biases every
// token of its tokenization (no special tokens), as llama-server; without `tok` it is a 400.
std::vector<std::pair<Token, float>> parse_logit_bias(const Json& value, int64_t n_vocab, const Tokenizer* tok = nullptr);

}  // namespace agentkv::server
