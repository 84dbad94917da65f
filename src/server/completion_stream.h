// How a completion's finished tasks become its answer, in each of the five API dialects (native
// /completion, OpenAI completions and chat, Anthropic messages, OpenAI responses): one JSON object
// when not streamed, Server-Sent Events while the tasks run when streamed.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "server/connection_probe.h"
#include "server/httplib_include.h"
#include "server/response_format.h"
#include "server/scheduler.h"
#include "server/task.h"

namespace agentkv::server {

// The answer to a request of several tasks: native answers as a list (llama-server), OpenAI
// ones as one object whose choices are every task's, with usage counting each prompt once.
Json combined_final_json(const std::vector<FinalResult>& finals, const std::vector<ResponseInfo>& infos,
                         size_t n_choices);

// Answers `res` with the tasks' events as they come (text/event-stream), infos[i] describing
// channels[i]; the tasks are cancelled when the client goes away (`probe`) or a write fails.
void stream_completion(httplib::Response& res, const std::vector<std::shared_ptr<TaskChannel>>& channels,
                       std::vector<ResponseInfo> infos, const ConnectionProbe& probe, Scheduler& scheduler);

}  // namespace agentkv::server
