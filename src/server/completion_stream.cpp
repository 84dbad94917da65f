#include "server/completion_stream.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "server/anthropic_messages.h"
#include "server/http_helpers.h"
#include "server/openai_responses.h"
#include "server/server_error.h"

namespace agentkv::server {

namespace {

std::string sse(const Json& j) { return "data: " + dump(j) + "\n\n"; }
// Anthropic's and the Responses API's events name themselves: "event: TYPE" before the data.
std::string named_sse(const Json& j) { return "event: " + j.value("type", "message") + "\n" + sse(j); }

// One task's stream: how its events become chunks.
struct SubStream {
  std::shared_ptr<TaskChannel> channel;
  ResponseInfo info;
  ChatStream chat;
  AnthropicStream anthropic;
  ResponsesStream responses;
  bool first_token = true;
  bool done = false;
};

// A streamed completion's state, shared by httplib's content provider calls: one sub-stream per
// task (several for `n` > 1 or a list of prompts, their chunks told apart by "index").
struct StreamState {
  std::vector<SubStream> subs;
  ConnectionProbe probe;
  Scheduler* scheduler = nullptr;
  void cancel() {
    for (SubStream& s : subs) s.channel->cancel();
    scheduler->wake();
  }
};

std::vector<Json> token_chunks(const TokenEvent& t, SubStream& st) {
  if (t.progress) {
    // Anthropic streams have no such event; the Responses API's is response.in_progress.
    if (st.info.kind == ResponseKind::Anthropic) return {};
    if (st.info.kind == ResponseKind::Responses) return st.responses.on_progress(t, st.info);
    return {progress_chunk(t, st.info)};
  }
  switch (st.info.kind) {
    case ResponseKind::Native: return {native_partial_json(t, st.info)};
    case ResponseKind::OaiCompletion: return {oai_completion_chunk_json(t, st.info)};
    case ResponseKind::OaiChat: return oai_chat_token_chunks(t, st.info, st.first_token, st.chat);
    case ResponseKind::Anthropic: return st.anthropic.on_token(t, st.info);
    case ResponseKind::Responses: return st.responses.on_token(t, st.info);
  }
  return {};
}

std::vector<Json> final_chunks(const FinalResult& r, SubStream& st) {
  const ResponseInfo& info = st.info;
  switch (info.kind) {
    case ResponseKind::Native: return {native_final_json(r, info)};
    case ResponseKind::OaiCompletion: return {oai_completion_final_json(r, info)};
    case ResponseKind::OaiChat: return oai_chat_final_chunks(r, info, st.chat);
    case ResponseKind::Anthropic: return st.anthropic.on_final(r, info);
    case ResponseKind::Responses: return st.responses.on_final(r, info);
  }
  return {};
}

// llama-server's response_fields: {"a/b": value of j["a"]["b"], ...}; a missing path is left out.
Json select_fields(const Json& j, const std::vector<std::string>& paths) {
  Json out = Json::object();
  for (const std::string& path : paths) {
    const Json* v = &j;
    for (size_t start = 0; v && start <= path.size();) {
      const size_t end = std::min(path.find('/', start), path.size());
      const auto it = v->is_object() ? v->find(path.substr(start, end - start)) : v->end();
      v = it != v->end() ? &*it : nullptr;
      start = end + 1;
    }
    if (v) out[path] = *v;
  }
  return out;
}

Json final_json(const FinalResult& r, const ResponseInfo& info) {
  switch (info.kind) {
    case ResponseKind::Native:
      if (!info.params.response_fields.empty()) return select_fields(native_final_json(r, info), info.params.response_fields);
      return native_final_json(r, info);
    case ResponseKind::OaiCompletion: return oai_completion_final_json(r, info);
    case ResponseKind::OaiChat: return oai_chat_final_json(r, info);
    case ResponseKind::Anthropic: return anthropic_message_json(r, info);
    case ResponseKind::Responses: return responses_json(r, info);
  }
  return Json::object();
}

// One streamed event: Anthropic and Responses events are named ("event: TYPE"); the others are
// data lines only.
std::string sse_event(const Json& chunk, ResponseKind kind) {
  return kind == ResponseKind::Anthropic || kind == ResponseKind::Responses ? named_sse(chunk) : sse(chunk);
}

std::string sse_error(const HttpError& e, ResponseKind kind) {
  if (kind == ResponseKind::Anthropic) return named_sse(anthropic_error_body(e));
  if (kind == ResponseKind::Responses) return named_sse(Json{{"type", "error"}, {"code", error_type_name(e.type())},
                                                             {"message", e.what()}, {"param", nullptr}});
  return sse(error_body(e));
}

}  // namespace

Json combined_final_json(const std::vector<FinalResult>& finals, const std::vector<ResponseInfo>& infos,
                         size_t n_choices) {
  if (finals.size() == 1) return final_json(finals[0], infos[0]);
  if (infos[0].kind == ResponseKind::Native) {
    Json list = Json::array();
    for (size_t i = 0; i < finals.size(); ++i) list.push_back(final_json(finals[i], infos[i]));
    return list;
  }
  Json j;  // the first answer, with every answer's choices
  Json choices = Json::array();
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < finals.size(); ++i) {
    Json answer = final_json(finals[i], infos[i]);
    for (Json& choice : answer["choices"]) choices.push_back(std::move(choice));
    if (i == 0) j = std::move(answer);
    const Json usage = usage_json(finals[i]);
    completion_tokens += usage.value("completion_tokens", int64_t{0});
    if (i % n_choices != 0) continue;  // the prompt was counted with its first choice
    prompt_tokens += usage.value("prompt_tokens", int64_t{0});
    cached_tokens += usage.value("/prompt_tokens_details/cached_tokens"_json_pointer, int64_t{0});
  }
  j["usage"] = Json{{"completion_tokens", completion_tokens},
                    {"prompt_tokens", prompt_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens},
                    {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  j["choices"] = std::move(choices);
  return j;
}

void stream_completion(Response& res, const std::vector<std::shared_ptr<TaskChannel>>& channels,
                       std::vector<ResponseInfo> infos, const ConnectionProbe& probe, Scheduler& scheduler) {
  auto st = std::make_shared<StreamState>();
  for (size_t i = 0; i < channels.size(); ++i) {
    SubStream sub;
    sub.channel = channels[i];
    sub.info = std::move(infos[i]);
    st->subs.push_back(std::move(sub));
  }
  st->probe = probe;
  st->scheduler = &scheduler;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) -> bool {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        const ResponseKind kind = st->subs[0].info.kind;
        // One task waits for its events; several are polled in turn.
        const auto wait = st->subs.size() == 1 ? kPollInterval : std::chrono::milliseconds(5);
        bool any_event = false;
        for (SubStream& sub : st->subs) {
          if (sub.done) continue;
          auto events = sub.channel->wait(wait);
          any_event = any_event || !events.empty();
          for (TaskEvent& ev : events) {
            if (ev.kind == TaskEvent::Kind::Token) {
              for (const Json& chunk : token_chunks(ev.token, sub)) {
                if (!write(sse_event(chunk, kind))) {
                  st->cancel();
                  return false;
                }
              }
              if (!ev.token.progress) sub.first_token = false;
            } else if (ev.kind == TaskEvent::Kind::Final) {
              if (sub.info.index == 0) note_timings(ev.final.timings);
              for (const Json& chunk : final_chunks(ev.final, sub)) write(sse_event(chunk, kind));
              sub.done = true;
            } else {  // one task's error ends the stream
              write(sse_error(*ev.error, kind));
              st->cancel();
              sink.done();
              return true;
            }
          }
        }
        if (std::all_of(st->subs.begin(), st->subs.end(), [](const SubStream& s) { return s.done; })) {
          if (kind == ResponseKind::OaiCompletion || kind == ResponseKind::OaiChat) write("data: [DONE]\n\n");
          sink.done();
          return true;
        }
        if (!any_event && !st->probe.alive()) {
          st->cancel();
          return false;
        }
        return true;
      },
      [st](bool success) {
        if (!success) st->cancel();
      });
}

}  // namespace agentkv::server
