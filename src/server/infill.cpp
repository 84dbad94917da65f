#include "server/infill.h"

#include <algorithm>

#include "server/completion_params.h"
#include "server/server_error.h"

namespace agentkv::server {
namespace {

const char* const kInfillFields[] = {"input_prefix", "input_suffix", "input_extra"};

std::vector<Token> text_tokens(const Tokenizer& tok, const std::string& text) { return tok.encode(text, false, false); }

}  // namespace

InfillRequest parse_infill_request(const Json& body, const Tokenizer& tok) {
  const Tokenizer::FimTokens& fim = tok.fim();
  std::string missing;
  if (fim.pre < 0) missing += "prefix token is missing. ";
  if (fim.suf < 0) missing += "suffix token is missing. ";
  if (fim.mid < 0) missing += "middle token is missing. ";
  if (!missing.empty()) throw HttpError(ErrorType::NotSupported, "Infill is not supported by this model: " + missing);

  InfillRequest r;
  if (body.contains("prompt") && !body["prompt"].is_string()) throw invalid_request("\"prompt\" must be a string");
  if (!body.contains("input_prefix")) throw invalid_request("\"input_prefix\" is required");
  if (!body.contains("input_suffix")) throw invalid_request("\"input_suffix\" is required");
  if (body.contains("input_extra") && !body["input_extra"].is_array())
    throw invalid_request("\"input_extra\" must be an array of {\"filename\": string, \"text\": string}");
  r.input_prefix = body["input_prefix"];
  r.input_suffix = body["input_suffix"];
  parse_prompt(r.input_prefix);  // a string or a mixed prompt, else 400
  parse_prompt(r.input_suffix);
  for (const Json& chunk : body.value("input_extra", Json::array())) {
    if (!chunk.is_object() || !chunk.contains("text") || !chunk["text"].is_string())
      throw invalid_request("extra_context chunk must contain a \"text\" field with a string value");
    if (chunk.contains("filename") && !chunk["filename"].is_string())
      throw invalid_request("extra_context chunk's \"filename\" field must be a string");
    InfillChunk c;
    c.text = chunk["text"].get<std::string>();
    if (chunk.contains("filename")) c.filename = chunk["filename"].get<std::string>();
    r.extra.push_back(std::move(c));
  }
  if (body.contains("prompt")) r.prompt = body["prompt"].get<std::string>();
  return r;
}

std::vector<Token> format_infill(const Tokenizer& tok, const InfillRequest& req, int n_batch, int n_predict, int n_ctx,
                                 bool spm_infill) {
  const Tokenizer::FimTokens& fim = tok.fim();
  std::vector<Token> extra;
  if (fim.rep >= 0) {
    extra.push_back(fim.rep);
    const auto repo = text_tokens(tok, "myproject\n");
    extra.insert(extra.end(), repo.begin(), repo.end());
  }
  for (const InfillChunk& c : req.extra) {
    if (fim.sep >= 0) {
      extra.push_back(fim.sep);
      const auto file = text_tokens(tok, c.filename + "\n");
      extra.insert(extra.end(), file.begin(), file.end());
    } else {
      const auto snippet = text_tokens(tok, "\n\n--- snippet ---\n\n");
      extra.insert(extra.end(), snippet.begin(), snippet.end());
    }
    const auto text = text_tokens(tok, c.text);
    extra.insert(extra.end(), text.begin(), text.end());
  }
  if (fim.sep >= 0) {
    extra.push_back(fim.sep);
    const auto file = text_tokens(tok, "filename\n");
    extra.insert(extra.end(), file.begin(), file.end());
  }

  std::vector<Token> prefix = tokenize_prompt(tok, parse_prompt(req.input_prefix), false, false);
  std::vector<Token> suffix = tokenize_prompt(tok, parse_prompt(req.input_suffix), false, false);
  const std::vector<Token> prompt = tok.encode(req.prompt, false, true);
  const int n_prefix_take = std::min<int>(static_cast<int>(prefix.size()), 3 * (n_batch / 4));
  const int n_suffix_take = std::min<int>(static_cast<int>(suffix.size()),
                                          std::max<int>(0, n_batch / 4 - (2 + static_cast<int>(prompt.size()))));
  const int n_extra_take = std::min<int>(std::max<int>(0, n_ctx - n_batch - 2 * n_predict), static_cast<int>(extra.size()));

  prefix.erase(prefix.begin(), prefix.end() - n_prefix_take);  // the prefix's end is nearest the hole
  suffix.resize(static_cast<size_t>(n_suffix_take));
  prefix.insert(prefix.begin(), fim.pre);
  prefix.insert(prefix.end(), prompt.begin(), prompt.end());
  suffix.insert(suffix.begin(), fim.suf);

  std::vector<Token> out = spm_infill ? suffix : prefix;
  const std::vector<Token>& end = spm_infill ? prefix : suffix;
  if (tok.add_bos() && tok.bos() >= 0) out.insert(out.begin(), tok.bos());
  out.insert(out.begin(), extra.end() - n_extra_take, extra.end());
  out.insert(out.end(), end.begin(), end.end());
  out.push_back(fim.mid);
  return out;
}

Json infill_completion_body(Json body) {
  for (const char* f : kInfillFields) body.erase(f);
  body.erase("prompt");
  return body;
}

}  // namespace agentkv::server
