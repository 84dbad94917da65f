// Token sampling with llama.cpp's default sampler chain, and stop-string detection for streaming.
//
// Chain (llama.cpp common_sampler order, same semantics): repetition penalties -> top-k ->
// top-p -> min-p -> temperature -> random draw. temperature <= 0 is greedy: the argmax of the
// penalised logits (ties -> lowest id). Draws are deterministic for a given seed.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agentkv {

struct SamplerParams {
  float temperature = 0.8f;        // <= 0: greedy
  int32_t top_k = 40;              // <= 0: off
  float top_p = 0.95f;             // >= 1: off
  float min_p = 0.05f;             // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off. Divides positive logits, multiplies negative ones
  int32_t repeat_last_n = 64;      // history window for all penalties; 0: off, -1: whole history
  float presence_penalty = 0.0f;   // subtracted once from every token in the window
  float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
  uint32_t seed = 0;
};

// Index of the largest logit; ties go to the lowest id. n_vocab must be > 0.
int32_t argmax_token(const float* logits, int64_t n_vocab);

class Sampler {
 public:
  // Refuses (agentkv::Error) NaN parameters, negative penalties and repeat_last_n < -1.
  explicit Sampler(const SamplerParams& params);

  // Picks the next token from one logits row. `history` is the sequence so far (prompt and
  // generated tokens, oldest first); penalties use its last repeat_last_n entries.
  int32_t sample(const float* logits, int64_t n_vocab, std::span<const int32_t> history = {});
  // The same chain over the tokens `ids` only (ascending ids), as if every other token's logit
  // were -inf: constrained decoding samples among what its grammar allows without a masked
  // copy of the whole row.
  int32_t sample_among(const float* logits, std::span<const int32_t> ids, std::span<const int32_t> history = {});

  // The distribution the last draw was made from, after every filter and the temperature: the
  // tokens with a probability above 0, most likely first (ties: lower id first), probabilities
  // summing to 1 (llama-server's post_sampling_probs). Greedy: the chosen token alone, at 1.
  std::vector<std::pair<int32_t, float>> last_distribution() const;

  void reseed(uint32_t seed) { rng_.seed(seed); }
  const SamplerParams& params() const { return params_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  void apply_penalties(std::vector<Candidate>& cands, std::span<const int32_t> history, bool dense) const;
  int32_t draw();  // the chain after the penalties, over cands_; remembers its distribution
  int32_t draw_from_chain();
  double next_uniform();  // in [0, 1), 53 random bits

  SamplerParams params_;
  std::mt19937 rng_;
  std::vector<Candidate> cands_;
  std::vector<float> probs_;
  size_t last_size_ = 0;     // cands_ / probs_ [0, last_size_) hold the last draw's distribution
  int32_t last_token_ = -1;  // the last draw's token: alone in its distribution when last_size_ is 0 (greedy)
};

// Stop strings in streamed output. Text that could still turn out to be the start of a stop
// string is held back (as llama-server does) and so is an incomplete UTF-8 sequence at the end;
// once a stop string appears, the text before it is released and the rest is dropped.
class StopChecker {
 public:
  explicit StopChecker(std::vector<std::string> stop_strings);  // empty strings are ignored

  struct Step {
    std::string text;     // newly releasable text
    bool stopped = false;  // a stop string was found (this step or earlier)
  };
  // Appends one token's text.
  Step push(std::string_view piece);
  // Generation ended without a stop string: releases whatever was held back.
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string found, if any
  // All text up to the stop string (or everything so far).
  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stops_;
  std::string text_;
  size_t released_ = 0;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace agentkv
