// Embedding requests and responses (`--embedding`): llama-server's native /embedding and
// /embeddings, and OpenAI's /v1/embeddings. A request holds one or several inputs (a string, an
// array of token ids, or an array of either); each becomes its own task, pooled by the scheduler
// (agentkv/pooling.h) and normalized here.
#pragma once
#include <string>
#include <vector>

#include <cstdint>
#include <optional>

#include "agentkv/pooling.h"
#include "server/json_fields.h"
#include "agentkv/tokenizer.h"

namespace agentkv::server {

enum class EmbeddingApi { Native, OpenAi };

struct EmbeddingRequest {
  std::vector<std::vector<Token>> inputs;
  int embd_normalize = 2;  // llama.cpp's default: euclidean
  bool base64 = false;     // OpenAI encoding_format "base64": little-endian float32
};

// Throws invalid_request for a missing, empty or malformed input, or pooling none on the OpenAI API
// (its shape has one vector per input).
EmbeddingRequest parse_embedding_request(const Json& body, const Tokenizer& tok, EmbeddingApi api, Pooling pooling);

// --pooling's value, else the model's own (its GGUF's <arch>.pooling_type), else none (llama.cpp's
// rule). Throws std::invalid_argument for an unknown name.
Pooling embedding_pooling(const std::string& flag, std::optional<uint64_t> gguf_pooling_type);

// rows[i]: the pooled rows of input i (one row, or one per token with pooling none).
Json embedding_response(EmbeddingApi api, const EmbeddingRequest& req, std::vector<std::vector<std::vector<float>>> rows,
                        Pooling pooling, const std::string& model);

}  // namespace agentkv::server
