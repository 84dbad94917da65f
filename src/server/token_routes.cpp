// The routes that work on tokens and text without generating: /tokenize, /detokenize,
// /apply-template, and the embedding routes of an embedding server (--embeddings).
#include "server/connection_probe.h"
#include "server/http_server_impl.h"
#include "server/json_fields.h"
#include "server/utf8.h"

namespace agentkv::server {

void HttpServer::tokenize(const Request& req, Response& res) {
  const Tokenizer& tok = engine_->model->tokenizer();
  const Json body = parse_body_object(req.body);
  Json tokens = Json::array();
  if (has_field(body, "content")) {
    const bool add_special = read_bool(body, "add_special", false);
    const bool parse_special = read_bool(body, "parse_special", true);
    const bool with_pieces = read_bool(body, "with_pieces", false);
    for (Token id : tokenize_prompt(tok, parse_prompt(body.at("content")), add_special, parse_special)) {
      if (!with_pieces) {
        tokens.push_back(id);
        continue;
      }
      // A piece that is not valid UTF-8 on its own is given as its bytes (llama-server's rule).
      const std::string piece = tok.token_to_piece(id, true);
      Json piece_json;
      if (is_valid_utf8(piece)) {
        piece_json = piece;
      } else {
        piece_json = Json::array();
        for (unsigned char c : piece) piece_json.push_back(static_cast<int>(c));
      }
      tokens.push_back(Json{{"id", id}, {"piece", piece_json}});
    }
  }
  send_json(res, Json{{"tokens", tokens}});
}

void HttpServer::detokenize(const Request& req, Response& res) {
  const Tokenizer& tok = engine_->model->tokenizer();
  const Json body = parse_body_object(req.body);
  std::vector<Token> ids;
  if (has_field(body, "tokens")) {
    const Json& list = body.at("tokens");
    if (!list.is_array()) throw invalid_request("field 'tokens' must be an array of token ids");
    for (const Json& item : list) {
      if (!item.is_number_integer() || item.get<int64_t>() < 0 || item.get<int64_t>() >= tok.n_vocab())
        throw invalid_request("field 'tokens' must hold token ids in [0, " + std::to_string(tok.n_vocab()) + ")");
      ids.push_back(item.get<Token>());
    }
  }
  send_json(res, Json{{"content", tok.decode(ids, true)}});
}

void HttpServer::apply_template(const Request& req, Response& res) {
  Json body = parse_body_object(req.body);
  apply_chat_defaults(body);
  send_json(res, Json{{"prompt", engine_->chat->apply(body)}});
}


void HttpServer::embeddings(const Request& req, Response& res, EmbeddingApi api) {
  if (!cfg_.embeddings)
    throw HttpError(ErrorType::NotSupported,
                    "This server does not support embeddings. Start it with `--embeddings`");
  Engine& e = *engine_;
  const Json body = parse_body_object(req.body);
  const Pooling pooling = e.scheduler->config().pooling;
  const EmbeddingRequest er = parse_embedding_request(body, e.model->tokenizer(), api, pooling);
  // Every input is checked before any is queued: a refused request leaves no task behind.
  for (const std::vector<Token>& input : er.inputs) check_prompt_fits(input, e.scheduler->config().n_ctx);
  std::vector<std::shared_ptr<TaskChannel>> channels;
  for (const std::vector<Token>& input : er.inputs) {
    auto task = std::make_shared<Task>();
    task->id = next_task_id_++;
    task->params.cache_prompt = false;  // every row is pooled: nothing can come from a cache
    task->params.n_predict = 0;
    task->prompt = input;
    channels.push_back(task->channel);
    e.scheduler->submit(std::move(task));
  }
  auto cancel_all = [&] {
    for (auto& c : channels) c->cancel();
    e.scheduler->wake();
  };
  ConnectionProbe probe(req.local_port, req.remote_addr, req.remote_port);
  std::vector<std::vector<std::vector<float>>> rows(channels.size());
  for (size_t i = 0; i < channels.size();) {
    bool done = false;
    for (TaskEvent& ev : channels[i]->wait(kPollInterval)) {
      if (ev.kind == TaskEvent::Kind::Error) {
        cancel_all();
        send_error(res, *ev.error);
        return;
      }
      if (ev.kind != TaskEvent::Kind::Final) continue;
      rows[i] = std::move(ev.final.embedding);
      done = true;
    }
    if (done) {
      ++i;
      continue;
    }
    if (!probe.alive()) {
      cancel_all();
      res.status = 499;
      return;
    }
  }
  send_json(res, embedding_response(api, er, std::move(rows), pooling, model_name_));
}

}  // namespace agentkv::server
