#include "server/embeddings.h"

#include <cstring>
#include <stdexcept>

#include "server/agent_request.h"
#include "server/base64.h"
#include "server/completion_params.h"
#include "server/server_error.h"

namespace agentkv::server {
namespace {

// One input: a string, or an array of token ids (with strings mixed in, as a prompt may).
bool is_single_input(const Json& v) {
  if (v.is_string()) return true;
  if (!v.is_array() || v.empty()) return false;
  for (const Json& item : v)
    if (!item.is_number_integer()) return false;
  return true;
}

std::string floats_base64(const std::vector<float>& row) {
  std::vector<uint8_t> bytes(row.size() * sizeof(float));
  std::memcpy(bytes.data(), row.data(), bytes.size());  // x86-64: little-endian, as OpenAI's float32
  return base64_encode(bytes);
}

}  // namespace

Pooling embedding_pooling(const std::string& flag, std::optional<uint64_t> gguf_pooling_type) {
  if (!flag.empty()) {
    const auto p = parse_pooling(flag);
    if (!p) throw std::invalid_argument("--pooling: expected none, mean, cls or last, not '" + flag + "'");
    return *p;
  }
  if (gguf_pooling_type)
    if (const auto p = pooling_from_gguf(static_cast<uint32_t>(*gguf_pooling_type))) return *p;
  return Pooling::None;
}

EmbeddingRequest parse_embedding_request(const Json& body, const Tokenizer& tok, EmbeddingApi api, Pooling pooling) {
  if (api == EmbeddingApi::OpenAi && pooling == Pooling::None)
    throw invalid_request("Pooling type 'none' is not OAI compatible. Please use a different pooling type");
  check_known_fields(body, Endpoint::Embedding);  // e.g. OpenAI's "dimensions": a 400, not ignored
  const char* primary = api == EmbeddingApi::OpenAi ? "input" : "content";
  const char* other = api == EmbeddingApi::OpenAi ? "content" : "input";
  const Json* input = body.contains(primary) ? &body[primary] : body.contains(other) ? &body[other] : nullptr;
  if (!input) throw invalid_request(std::string("\"") + primary + "\" is required");
  std::vector<Json> items;
  if (is_single_input(*input)) items.push_back(*input);
  else if (input->is_array()) items.assign(input->begin(), input->end());
  else throw invalid_request(std::string("\"") + primary + "\" must be a string, an array of token ids, or an array of those");
  if (items.empty()) throw invalid_request("Input content cannot be empty");

  EmbeddingRequest req;
  for (const Json& item : items) {
    if (!item.is_string() && !is_single_input(item))
      throw invalid_request(std::string("every item of \"") + primary + "\" must be a string or an array of token ids");
    std::vector<Token> tokens = tokenize_prompt(tok, parse_prompt(item), /*add_special=*/true);
    if (tokens.empty()) throw invalid_request("Input content cannot be empty");
    req.inputs.push_back(std::move(tokens));
  }
  if (body.contains("embd_normalize")) {
    if (!body["embd_normalize"].is_number_integer()) throw invalid_request("\"embd_normalize\" must be an integer");
    req.embd_normalize = body["embd_normalize"].get<int>();
    if (req.embd_normalize < -1) throw invalid_request("\"embd_normalize\" must be -1 (none), 0, 1, 2 or a larger p");
  }
  if (body.contains("encoding_format")) {
    const Json& f = body["encoding_format"];
    if (!f.is_string() || (f != "float" && f != "base64"))
      throw invalid_request("\"encoding_format\" must be \"float\" or \"base64\"");
    req.base64 = f == "base64";
  }
  return req;
}

Json embedding_response(EmbeddingApi api, const EmbeddingRequest& req, std::vector<std::vector<std::vector<float>>> rows,
                        Pooling pooling, const std::string& model) {
  // Pooled rows are normalized; per-token rows (pooling none) are the raw hidden states, as llama-server.
  if (pooling != Pooling::None)
    for (auto& input : rows)
      for (auto& row : input) normalize_embedding(row, req.embd_normalize);
  Json data = Json::array();
  size_t n_tokens = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    n_tokens += req.inputs[i].size();
    if (api == EmbeddingApi::Native) {
      data.push_back(Json{{"index", i}, {"embedding", rows[i]}});
      continue;
    }
    Json item{{"object", "embedding"}, {"index", i}};
    if (req.base64) item["embedding"] = floats_base64(rows[i].front());
    else item["embedding"] = rows[i].front();
    data.push_back(std::move(item));
  }
  if (api == EmbeddingApi::Native) return data;
  return Json{{"object", "list"},
              {"model", model},
              {"data", std::move(data)},
              {"usage", Json{{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
}

}  // namespace agentkv::server
