// The completion routes of the five API dialects: native /completion, OpenAI /v1/completions and
// /v1/chat/completions, Anthropic /v1/messages and OpenAI /v1/responses (the last two translated to
// chat requests by anthropic_messages.h and openai_responses.h), /infill, and token counting.
#include <algorithm>
#include <ctime>
#include <limits>

#include "server/image_parts.h"
#include "server/image_prompt.h"
#include "server/agent_request.h"
#include "server/anthropic_messages.h"
#include "server/completion_stream.h"
#include "server/connection_probe.h"
#include "server/http_server_impl.h"
#include "server/infill.h"
#include "server/json_fields.h"
#include "server/openai_responses.h"

namespace agentkv::server {

namespace {

// OpenAI's `n` and a list of prompts: completions one request may ask for.
constexpr int64_t kMaxChoices = 64;
constexpr size_t kMaxTasksPerRequest = 128;

// Hybrid models keep a recurrent state only where one was snapshotted, so prompts that share a
// system prompt but not the question after it can share the system prompt only if a state after
// it exists: its token count, when the leading system messages render to a prefix of the prompt.
std::vector<size_t> system_prompt_end(const Engine& e, const Json& body, const std::vector<Token>& prompt) {
  if (!e.ctx->needs_snapshots()) return {};
  const std::optional<std::string> text = e.chat->apply_leading_system(body);
  if (!text) return {};
  const std::vector<Token> head = tokenize_prompt(e.model->tokenizer(), {{*text, -1}}, /*add_special=*/true);
  if (head.empty() || head.size() >= prompt.size() || !std::equal(head.begin(), head.end(), prompt.begin())) return {};
  return {head.size()};
}

}  // namespace

void HttpServer::completion(const Request& req, Response& res, ResponseKind kind) {
  completion_of(req, res, kind, parse_body_object(req.body));
}

void HttpServer::infill(const Request& req, Response& res) {
  if (cfg_.embeddings)
    throw HttpError(ErrorType::NotSupported, "This server does not support infill. Start it without `--embeddings`");
  Engine& e = *engine_;
  Json body = parse_body_object(req.body);
  const InfillRequest ir = parse_infill_request(body, e.model->tokenizer());
  CompletionParams params = request_params(body);  // n_predict: the server's default and cap included
  const std::vector<Token> prompt = format_infill(e.model->tokenizer(), ir, kInfillBatch, params.n_predict,
                                                  static_cast<int>(e.scheduler->config().n_ctx));
  body = infill_completion_body(std::move(body));
  body["prompt"] = prompt;
  completion_of(req, res, ResponseKind::Native, std::move(body), std::move(params));
}

void HttpServer::apply_chat_defaults(Json& body) const {
  // --reasoning-format, --reasoning-budget and --reasoning: the server's defaults where the request says nothing.
  if (!cfg_.reasoning_format.empty() && !body.contains("reasoning_format")) body["reasoning_format"] = cfg_.reasoning_format;
  if (cfg_.reasoning_budget >= 0 && !body.contains("reasoning_budget_tokens") && !body.contains("thinking_budget_tokens"))
    body["reasoning_budget_tokens"] = cfg_.reasoning_budget;
  if (cfg_.enable_thinking >= 0) {
    if (!body.contains("chat_template_kwargs")) body["chat_template_kwargs"] = Json::object();
    Json& kwargs = body["chat_template_kwargs"];
    if (kwargs.is_object() && !kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = cfg_.enable_thinking == 1;
  }
}

HttpServer::PreparedCompletion HttpServer::prepare_completion(const Request& req, ResponseKind kind, Json body,
                                                              std::optional<CompletionParams> parsed) const {
  if (cfg_.embeddings)  // the context keeps hidden states, not logits
    throw HttpError(ErrorType::NotSupported,
                    "This server does not support completions. Start it without `--embeddings`");
  const Engine& e = *engine_;
  const Tokenizer& tok = e.model->tokenizer();
  Json request_echo;
  if (kind == ResponseKind::Anthropic) body = anthropic_to_chat_request(body, AnthropicEndpoint::Messages);
  if (kind == ResponseKind::Responses) {
    request_echo = responses_echo(body);
    body = responses_to_chat_request(body);
  }
  const bool chat = kind == ResponseKind::OaiChat || kind == ResponseKind::Anthropic || kind == ResponseKind::Responses;

  const Endpoint endpoint = kind == ResponseKind::Native        ? Endpoint::Native
                            : kind == ResponseKind::OaiCompletion ? Endpoint::OaiCompletion
                                                                  : Endpoint::OaiChat;
  check_known_fields(body, endpoint);
  read_bool(body, "backend_sampling", false);  // a type check: agentkv samples on the CPU either way
  // `n` (llama-server also reads n_cmpl): choices per prompt, each its own task.
  const int64_t n_choices = has_field(body, "n_cmpl") ? read_int(body, "n_cmpl", 1, 1, kMaxChoices)
                                                      : read_int(body, "n", 1, 1, kMaxChoices);
  std::vector<std::vector<PromptPart>> prompts;
  // Each prompt's images, in the order its text's markers show them.
  std::vector<std::vector<std::vector<uint8_t>>> image_files;
  const MediaSource media{cfg_.max_body_bytes, cfg_.media_path};
  if (chat) {
    apply_chat_defaults(body);
    image_files.push_back(collect_chat_images(body, media));
    prompts.push_back({{e.chat->apply(body), -1}});
  } else {
    if (!has_field(body, "prompt")) throw invalid_request("'prompt' is required");
    // llama-server's {"prompt_string", "multimodal_data"} prompts carry their images.
    for (const Json& item : prompt_items(body.at("prompt"))) {
      prompts.push_back(parse_prompt(item, /*media_allowed=*/true));
      image_files.push_back(prompt_media(item, media));
    }
  }
  for (const auto& files : image_files)
    if (!files.empty() && !e.vision) throw no_projector_error();
  if (prompts.size() * static_cast<size_t>(n_choices) > kMaxTasksPerRequest)
    throw invalid_request("a request may ask for at most " + std::to_string(kMaxTasksPerRequest) +
                          " completions (prompts times n); this one asks for " +
                          std::to_string(prompts.size() * static_cast<size_t>(n_choices)));
  CompletionParams params = parsed ? std::move(*parsed) : request_params(body);
  session_from_header(req, params);
  const ToolFormat format = chat ? detect_tool_format(e.chat->template_source()) : ToolFormat::Hermes;
  parse_constraints(body, endpoint, params, format == ToolFormat::Harmony);
  // Anthropic's message_start reports the cache split, known from the first token's timings.
  if (kind == ResponseKind::Anthropic && params.stream) params.timings_per_token = true;
  ChatParseOptions chat_options;
  if (chat) {
    const std::string& source = e.chat->template_source();
    chat_options = parse_chat_options(body, format, prompts[0][0].text, params, template_dumps_arguments(source));
    // Harmony's framing is parsed with or without tools (its reasoning channel).
    if (chat_options.parse_tools || format == ToolFormat::Harmony) params.kept_control_tokens = tool_marker_tokens(format, tok);
  }

  ResponseInfo info;
  info.kind = kind;
  // OpenAI clients get back the model name they asked for, as from llama-server.
  info.model = kind != ResponseKind::Native && body.contains("model") && body["model"].is_string()
                   ? body["model"].get<std::string>()
                   : model_name_;
  info.completion_id = make_completion_id(kind == ResponseKind::Anthropic   ? "msg_"
                                          : kind == ResponseKind::Responses ? "resp_"
                                          : kind == ResponseKind::OaiChat   ? "chatcmpl-"
                                                                            : "cmpl-");
  info.fingerprint = kBuildInfo;
  info.created = static_cast<int64_t>(std::time(nullptr));
  info.chat = std::move(chat_options);
  info.request_echo = std::move(request_echo);

  PreparedCompletion out;
  out.n_choices = static_cast<size_t>(n_choices);
  out.stream = params.stream;
  for (size_t prompt_index = 0; prompt_index < prompts.size(); ++prompt_index) {
    const std::vector<PromptPart>& parts = prompts[prompt_index];
    const std::vector<std::vector<uint8_t>>& files = image_files[prompt_index];
    std::shared_ptr<PromptImages> images;
    std::vector<Token> prompt;
    if (!files.empty()) {
      images = std::make_shared<PromptImages>();
      // Each text piece keeps the tokens an earlier answer was generated as, after the same images.
      const PieceAligner align = [&](const std::string& piece, const std::vector<Token>& plain,
                                     std::span<const Token> before) {
        return e.scheduler->align_prompt(tok, piece, plain, params.cache_salt, before).tokens;
      };
      prompt = tokenize_with_images(tok, parts[0].text, *e.vision, files, images.get(), align);
    } else {
      prompt = tokenize_prompt(tok, parts, /*add_special=*/true);
      // A chat prompt re-renders earlier answers: keep the tokens the model generated for them.
      if (chat) prompt = e.scheduler->align_prompt(tok, parts[0].text, prompt, params.cache_salt).tokens;
    }
    check_prompt_fits(prompt, e.scheduler->config().n_ctx);
    if (params.n_fake_cached > 0 && static_cast<size_t>(params.n_fake_cached) >= prompt.size())
      throw invalid_request("n_fake_cached (" + std::to_string(params.n_fake_cached) +
                            ") must be below the prompt length (" + std::to_string(prompt.size()) + " tokens)");
    const std::vector<size_t> snapshot_points = chat ? system_prompt_end(e, body, prompt) : std::vector<size_t>{};
    for (int64_t c = 0; c < n_choices; ++c) {
      auto task = std::make_shared<Task>();
      task->id = next_task_id_++;
      task->prompt = prompt;
      task->images = images;
      task->params = params;
      // A fixed seed gives every choice its own draws (the same seed would give n equal answers).
      if (c > 0 && params.sampling.seed != kRandomSeed)
        task->params.sampling.seed = static_cast<uint32_t>((params.sampling.seed + static_cast<uint64_t>(c)) % kRandomSeed);
      task->snapshot_points = snapshot_points;
      ResponseInfo task_info = info;
      task_info.index = static_cast<int>(out.tasks.size());
      task_info.params = task->params;
      if (kind == ResponseKind::Native || params.verbose) task_info.prompt_text = tok.decode(task->prompt, true);
      out.tasks.push_back(std::move(task));
      out.infos.push_back(std::move(task_info));
    }
  }
  return out;
}

void HttpServer::completion_of(const Request& req, Response& res, ResponseKind kind, Json body,
                               std::optional<CompletionParams> params) {
  PreparedCompletion pc = prepare_completion(req, kind, std::move(body), std::move(params));
  Engine& e = *engine_;
  ConnectionProbe probe(req.local_port, req.remote_addr, req.remote_port);
  std::vector<std::shared_ptr<TaskChannel>> channels;
  for (std::shared_ptr<Task>& task : pc.tasks) {
    channels.push_back(task->channel);
    e.scheduler->submit(std::move(task));
  }
  auto cancel_all = [&] {
    for (auto& c : channels) c->cancel();
    e.scheduler->wake();
  };

  if (!pc.stream) {
    std::vector<FinalResult> finals(channels.size());
    for (size_t i = 0; i < channels.size(); ++i) {
      for (bool finished = false; !finished;) {
        for (TaskEvent& ev : channels[i]->wait(kPollInterval)) {
          if (ev.kind == TaskEvent::Kind::Final) {
            finals[i] = std::move(ev.final);
            finished = true;
          } else if (ev.kind == TaskEvent::Kind::Error) {
            cancel_all();
            send_error(res, *ev.error);
            return;
          }
        }
        if (!finished && !probe.alive()) {
          cancel_all();
          res.status = 499;  // client closed the request (nobody reads this)
          return;
        }
      }
    }
    note_timings(finals[0].timings);
    send_json(res, combined_final_json(finals, pc.infos, pc.n_choices));
    return;
  }

  stream_completion(res, channels, std::move(pc.infos), probe, *e.scheduler);
}

CompletionParams HttpServer::request_params(const Json& body) const {
  const Tokenizer& tok = engine_->model->tokenizer();
  CompletionParams p = parse_completion_params(body, cfg_.n_slots, tok.n_vocab(), request_defaults_, &tok);
  if (p.ignore_eos)  // llama-server's rule: every end-of-generation token is banned
    for (Token t : tok.eog_tokens()) p.logit_bias.emplace_back(t, -std::numeric_limits<float>::infinity());
  if (cfg_.n_predict > 0 && (p.n_predict < 0 || p.n_predict > cfg_.n_predict)) p.n_predict = cfg_.n_predict;
  return p;
}

void HttpServer::count_tokens(const Request& req, Response& res, ResponseKind kind) {
  const Engine& e = *engine_;
  Json chat = parse_body_object(req.body);
  if (kind == ResponseKind::Anthropic) chat = anthropic_to_chat_request(chat, AnthropicEndpoint::CountTokens);
  if (kind == ResponseKind::Responses) chat = responses_to_chat_request(chat);
  if (!chat.contains("messages")) throw invalid_request("'messages' is required");
  const std::string prompt = e.chat->apply(chat);
  const size_t n = tokenize_prompt(e.model->tokenizer(), {{prompt, -1}}, /*add_special=*/true).size();
  Json out{{"input_tokens", n}};
  if (kind != ResponseKind::Anthropic) out["object"] = "response.input_tokens";  // llama-server's OpenAI shape
  send_json(res, out);
}

}  // namespace agentkv::server
