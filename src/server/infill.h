// POST /infill (llama-server's): code completion between a prefix and a suffix, with the model's
// fill-in-the-middle tokens and the repo-level pattern (arXiv 2409.12186), the prompt built as
// llama.cpp's format_prompt_infill builds it:
//   [FIM_REP]myproject\n [FIM_SEP]file0\n chunk0 ... [FIM_SEP]filename\n [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]
// (extra chunks before the prefix as the context allows; prefix : suffix = 3 : 1 of a batch).
#pragma once
#include <string>
#include <vector>

#include "server/json_fields.h"
#include "agentkv/tokenizer.h"

namespace agentkv::server {

struct InfillChunk {
  std::string filename = "tmp";
  std::string text;
};

struct InfillRequest {
  Json input_prefix, input_suffix;  // a string or a mixed prompt
  std::vector<InfillChunk> extra;
  std::string prompt;               // text after the prefix, where generation starts
};

// Throws HttpError 501 when the model has no FIM prefix, suffix or middle token, and
// invalid_request for llama-server's validation failures.
InfillRequest parse_infill_request(const Json& body, const Tokenizer& tok);

// llama-server's n_batch (its -b default): the prefix keeps 3/4 of it, the suffix 1/4.
constexpr int kInfillBatch = 2048;

std::vector<Token> format_infill(const Tokenizer& tok, const InfillRequest& req, int n_batch, int n_predict, int n_ctx,
                                 bool spm_infill = false);

// The body without the infill fields, so that it is a completion request.
Json infill_completion_body(Json body);

}  // namespace agentkv::server
