// The fixtures' logits report (../shared/fixtures/reference/*.json): per prompt, its tokens, the
// top-k next-token logprobs at every prompt position (teacher forcing), a greedy continuation and
// the top-k at each generated step. Used by `agentkv logits` and by the fidelity tests, which
// compare agentkv with llama.cpp by the distance llama.cpp's own two runs have between them.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "agentkv/context.h"
#include "agentkv/vision.h"

namespace agentkv {

using TopList = std::vector<std::pair<Token, float>>;  // (token, logprob), descending

struct LogitsCase {
  std::string prompt;
  std::vector<Token> prompt_tokens;
  std::vector<TopList> prompt_top;
  std::vector<Token> generated;
  std::vector<TopList> generated_top;  // [i] = distribution generated[i] was chosen from
};

// Prompts separated by lines "@@@@" (the separator line and the newline before it are not part of
// either prompt).
std::vector<std::string> read_prompts_file(const std::string& path);

// Runs one case on sequence 0 of ctx (cleared first). With `forced`, generation feeds those tokens
// instead of the argmax (teacher forcing over the generated positions); `generated` still records
// the forced tokens.
LogitsCase compute_logits_case(Context& ctx, const std::string& prompt, int top_k, int n_gen,
                               const std::vector<Token>* forced = nullptr);

// The same for a prompt whose kMediaMarker markers take `images` (image files, in order; as many as
// markers, else agentkv::Error), laid out as a server lays them out (multi-axis rope positions). An
// image's rows sit in prompt_tokens as the negative ids the prefix index keys them by
// (image_row_token), with their top-k like any prompt position.
LogitsCase compute_image_logits_case(Context& ctx, const VisionEncoder& vision, const std::string& prompt,
                                     const std::vector<std::vector<uint8_t>>& images, int top_k, int n_gen);

nlohmann::json to_json(const std::vector<LogitsCase>& cases);
std::vector<LogitsCase> logits_cases_from_json(const nlohmann::json& j);
std::vector<LogitsCase> load_logits_report(const std::string& path);

struct LogitsDistance {
  double max_abs = 0;        // over tokens present in both top lists, all positions
  double mean_abs = 0;
  int top1_agree = 0;
  int n_positions = 0;
  int greedy_equal = 0;      // generated tokens equal position by position
  int greedy_total = 0;
};
// Distance of `a` to the reference `ref` (same prompts in the same order).
LogitsDistance logits_distance(const std::vector<LogitsCase>& a, const std::vector<LogitsCase>& ref);

}  // namespace agentkv
