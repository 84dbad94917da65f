// The routes about what the server holds: its properties (/props), the model (/models), the slots
// (/slots, their save / restore / adopt / erase actions), prefilled prompts (/v1/prefill), which
// prefix of a prompt is cached (/v1/cache/lookup) and the metrics (/metrics).
#include <chrono>
#include <ctime>
#include <filesystem>
#include <set>

#include "agentkv/kv_status.h"
#include "agentkv/numerics.h"
#include "server/base64.h"
#include "server/connection_probe.h"
#include "server/http_server_impl.h"
#include "server/image_parts.h"
#include "server/image_prompt.h"
#include "server/json_fields.h"
#include "server/metrics.h"

namespace agentkv::server {

namespace {

// The prompt of a request with `prompt` (one; a {"prompt_string", "multimodal_data"} object may
// carry images) or `messages` (rendered with the chat template; their image parts), tokenized as a
// completion's (/v1/prefill, /v1/cache/lookup).
struct RequestPrompt {
  std::vector<Token> tokens;
  std::shared_ptr<PromptImages> images;  // null: no image
};

RequestPrompt request_prompt(const Engine& e, const Json& body, const MediaSource& media) {
  std::vector<PromptPart> parts;
  std::vector<std::vector<uint8_t>> files;
  if (has_field(body, "messages")) {
    files = collect_chat_images(body, media);
    parts = {{e.chat->apply(body), -1}};
  } else {
    if (!has_field(body, "prompt")) throw invalid_request("'prompt' or 'messages' is required");
    parts = parse_prompt(body.at("prompt"), /*media_allowed=*/true);
    files = prompt_media(body.at("prompt"), media);
  }
  const Tokenizer& tok = e.model->tokenizer();
  RequestPrompt out;
  if (files.empty()) {
    out.tokens = tokenize_prompt(tok, parts, /*add_special=*/true);
    return out;
  }
  if (!e.vision) throw no_projector_error();
  out.images = std::make_shared<PromptImages>();
  out.tokens = tokenize_with_images(tok, parts[0].text, *e.vision, files, out.images.get(), {});
  return out;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

int parse_slot_id(const std::string& text) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos)
    throw invalid_request("invalid slot id '" + text + "'");
  return std::stoi(text);
}

}  // namespace

// What the KV cache stores: element types and the rotation of its rows (docs/quant-types.md).
Json HttpServer::kv_cache_props() const {
  const KvStatus kv = kv_status(*engine_->ctx);
  if (!kv.present) return nullptr;
  return Json{{"type_k", std::string(ggml_type_name(kv.type_k))},
              {"type_v", std::string(ggml_type_name(kv.type_v))},
              {"rotation", kv_rotation_mode_name(cfg_.kv.rotation)},
              {"rotation_k_block", kv.rotation_k_block},
              {"rotation_v_block", kv.rotation_v_block},
              {"rotation_seed", kv.rotation_seed},
              {"code_id", kv.code_id},  // tqc3's calibrated code (0: none)
              {"hot_cells", kv.windowed ? kv.hot_cells : 0},
              {"tail_heads_kept", kv.tail_heads_kept},  // retrieval heads: KV heads whose rows the tail keeps
              {"tail_heads_total", kv.tail_heads_total},
              {"tail_heads", kv.tail_heads}};
}

void HttpServer::props(Response& res) {
  const Engine& e = *engine_;
  const CompletionParams& defaults = request_defaults_;
  send_json(res, Json{
                     {"default_generation_settings", Json{{"id", 0},
                                                          {"id_task", -1},
                                                          {"n_ctx", e.scheduler->config().n_ctx},
                                                          {"speculative", defaults.spec_n_max > 0},
                                                          {"is_processing", false},
                                                          {"params", defaults.to_json()}}},
                     {"total_slots", cfg_.n_slots},
                     // agentkv: the slots share one memory, so n_ctx above is what one request may
                     // use (llama-server's is n_ctx / slots); the pool is what all share, cached
                     // pages (--cache-ram) included (docs/server.md, "Context").
                     {"n_ctx_request", e.scheduler->config().n_ctx},
                     // -md: the draft model speculative.type draft-simple drafts with (null: none).
                     {"draft_model", e.draft_model ? Json(std::filesystem::path(cfg_.draft_model_path).filename().string())
                                                   : Json(nullptr)},
                     {"n_ctx_pool", e.ctx->params().n_ctx},
                     {"model_alias", model_name_},
                     // the file name only: absolute paths of the host are not the clients' business
                     {"model_path", std::filesystem::path(cfg_.model_path).filename().string()},
                     {"modalities", Json{{"vision", e.vision != nullptr}, {"audio", false}}},
                     {"endpoint_slots", cfg_.endpoint_slots},
                     {"endpoint_props", false},
                     {"endpoint_metrics", cfg_.metrics},
                     {"chat_template", e.chat->template_source()},
                     {"bos_token", e.chat->bos_token()},
                     {"eos_token", e.chat->eos_token()},
                     {"build_info", kBuildInfo},
                     {"is_sleeping", false},
                     // agentkv: one prefix index for all slots; numerics independent of batching
                     {"share_prefixes", cfg_.share_prefixes},
                     {"batch_invariant", batch_invariant()},
                     {"kv_cache", kv_cache_props()},
                     {"memory", e.scheduler->memory_json()},
                 });
}

void HttpServer::slots(const Request& req, Response& res) {
  if (!cfg_.endpoint_slots)
    throw HttpError(ErrorType::NotSupported, "This server does not support slots endpoint. Start it with `--slots`");
  const Scheduler& sched = *engine_->scheduler;
  const std::string fail = req.has_param("fail_on_no_slot") ? req.get_param_value("fail_on_no_slot") : "";
  if ((fail == "1" || fail == "true") && !sched.has_idle_slot())
    throw HttpError(ErrorType::Unavailable, "no slot available");
  // Prompts are other clients' text: shown only when asked for, or to holders of the API key.
  send_json(res, sched.slots_json(request_defaults_, cfg_.slots_show_prompts || !cfg_.api_key.empty()));
}

void HttpServer::metrics(Response& res) {
  if (!cfg_.metrics)
    throw HttpError(ErrorType::NotSupported, "This server does not support metrics endpoint. Start it with `--metrics`");
  std::string text = prometheus_text(engine_->scheduler->metrics());
  if (engine_->tiers) {
    if (const auto warm = engine_->tiers->warm_stats()) text += prometheus_text(*warm);
    if (const auto disk = engine_->tiers->disk_stats()) text += prometheus_text(*disk);
  }
  if (engine_->vision) text += prometheus_text(engine_->vision->stats());
  res.set_content(text, "text/plain; version=0.0.4");
}

const StateFolder& HttpServer::state_folder() const {
  if (!state_folder_)
    throw HttpError(ErrorType::NotSupported, "This server does not support slots action. Start it with `--slot-save-path`");
  return *state_folder_;
}

void HttpServer::slot_action(const Request& req, Response& res) {
  Scheduler& sched = *engine_->scheduler;
  const int id = parse_slot_id(req.matches[1]);
  const std::string action = req.has_param("action") ? req.get_param_value("action") : "";
  const Json body = req.body.empty() ? Json::object() : parse_body_object(req.body);
  const auto t0 = Clock::now();
  if (action == "erase") {
    const size_t n = sched.erase_slot(id);
    send_json(res, Json{{"id_slot", id}, {"n_erased", n}});
  } else if (action == "save") {
    const std::string filename = read_string(body, "filename", "");
    state_folder();
    StateFolder::check_name(filename);
    const SlotStateBlob saved = sched.save_slot(id);
    state_folder().write(filename, saved.blob);
    send_json(res, Json{{"id_slot", id},
                        {"filename", filename},
                        {"n_saved", saved.n_tokens},
                        {"n_written", saved.blob.size()},
                        {"timings", Json{{"save_ms", ms_since(t0)}}}});
  } else if (action == "restore" || action == "adopt") {
    // adopt also takes a state made elsewhere inline: {"state": base64}.
    std::vector<uint8_t> blob;
    std::string filename;
    std::string what;
    if (action == "adopt" && has_field(body, "state")) {
      if (!body["state"].is_string()) throw invalid_request("field 'state' must be a base64 string");
      blob = base64_decode(body["state"].get_ref<const std::string&>(), "field 'state'");
      what = "state in the request";
    } else {
      filename = read_string(body, "filename", "");
      blob = state_folder().read(filename);
      what = "state file " + filename;
    }
    const size_t n = sched.restore_slot(id, blob, what);
    Json out{{"id_slot", id}};
    if (!filename.empty()) out["filename"] = filename;
    out["n_restored"] = n;
    out["n_read"] = blob.size();
    out["timings"] = Json{{"restore_ms", ms_since(t0)}};
    send_json(res, out);
  } else {
    throw invalid_request("Invalid action '" + action + "': use save, restore, adopt or erase");
  }
}

void HttpServer::prefill(const Request& req, Response& res) {
  if (cfg_.embeddings)
    throw HttpError(ErrorType::NotSupported, "This server does not support prefill. Start it without `--embeddings`");
  Engine& e = *engine_;
  const Json body = parse_body_object(req.body);
  RequestPrompt prompt = request_prompt(e, body, MediaSource{cfg_.max_body_bytes, cfg_.media_path});
  const std::string filename = read_string(body, "filename", "");
  if (!filename.empty()) {
    state_folder();
    StateFolder::check_name(filename);
  }
  auto task = std::make_shared<Task>();
  task->id = next_task_id_++;
  task->params = request_params(body);
  session_from_header(req, task->params);
  if (task->params.n_fake_cached > 0) throw invalid_request("n_fake_cached cannot be prefilled: its prefix is not real");
  task->params.n_predict = 0;
  task->params.stream = false;
  task->return_state = true;
  task->prompt = std::move(prompt.tokens);
  task->images = std::move(prompt.images);
  check_prompt_fits(task->prompt, e.scheduler->config().n_ctx);
  ConnectionProbe probe(req.local_port, req.remote_addr, req.remote_port);
  std::shared_ptr<TaskChannel> channel = task->channel;
  e.scheduler->submit(std::move(task));
  while (true) {
    for (TaskEvent& ev : channel->wait(kPollInterval)) {
      if (ev.kind == TaskEvent::Kind::Error) {
        send_error(res, *ev.error);
        return;
      }
      if (ev.kind != TaskEvent::Kind::Final) continue;
      const FinalResult& r = ev.final;
      note_timings(r.timings);
      Json out{{"id_slot", r.id_slot},
               {"n_prompt_tokens", r.n_prompt},
               {"n_tokens", r.n_cached},
               {"n_bytes", r.state.size()},
               {"timings", r.timings.to_json()}};
      if (filename.empty()) {
        out["state"] = base64_encode(r.state);
      } else {
        state_folder().write(filename, r.state);
        out["filename"] = filename;
      }
      send_json(res, out);
      return;
    }
    if (!probe.alive()) {
      channel->cancel();
      e.scheduler->wake();
      res.status = 499;
      return;
    }
  }
}

void HttpServer::cache_lookup(const Request& req, Response& res) {
  // What a prefix-aware router asks each instance: how much of this prompt it holds (llm-d's
  // scorer, docs/deploy.md). The prompt is rendered and tokenized as a completion would be.
  Engine& e = *engine_;
  const Json body = parse_body_object(req.body);
  // What renders the prompt, and the salt; a field meant for a completion is a client's mistake.
  static const std::set<std::string> kLookupFields = {"prompt", "messages", "tools", "tool_choice",
                                                      "chat_template_kwargs", "add_generation_prompt",
                                                      "cache_salt", "model", "session_id"};
  for (auto it = body.begin(); it != body.end(); ++it)
    if (!kLookupFields.count(it.key()))
      throw invalid_request("field '" + it.key() + "' is not supported by /v1/cache/lookup (it evaluates nothing)");
  // Images are decoded and hashed, not projected: the lookup evaluates nothing.
  const std::vector<Token> prompt = request_prompt(e, body, MediaSource{cfg_.max_body_bytes, cfg_.media_path}).tokens;
  const size_t cached = e.scheduler->cached_prefix(prompt, read_string(body, "cache_salt", ""));
  const size_t page = e.scheduler->config().page_tokens;
  send_json(res, Json{{"n_prompt_tokens", prompt.size()},
                      {"n_cached_tokens", cached},
                      {"page_tokens", page},
                      {"n_cached_pages", cached / page}});
}

void HttpServer::models(Response& res) {
  const ModelConfig& mc = engine_->model->config();
  send_json(res, Json{{"object", "list"},
                      {"data", Json::array({Json{{"id", model_name_},
                                                 {"aliases", model_aliases_},
                                                 {"tags", model_tags_},
                                                 {"object", "model"},
                                                 {"created", static_cast<int64_t>(std::time(nullptr))},
                                                 {"owned_by", "llamacpp"},
                                                 {"meta", Json{{"n_vocab", mc.n_vocab},
                                                               {"n_ctx_train", mc.n_ctx_train},
                                                               {"n_embd", mc.n_embd}}}}})}});
}

}  // namespace agentkv::server
