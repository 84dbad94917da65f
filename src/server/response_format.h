// JSON shapes of completion results, field for field as llama-server writes them: the native
// /completion objects, OpenAI text completions and OpenAI chat completions (whole and streamed).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "server/completion_params.h"
#include "server/task.h"
#include "server/tool_calls.h"

namespace agentkv::server {

// Anthropic: /v1/messages (anthropic_messages.h); Responses: /v1/responses (openai_responses.h).
// Both are chat completions in other shapes.
enum class ResponseKind { Native, OaiCompletion, OaiChat, Anthropic, Responses };

struct ResponseInfo {
  ResponseKind kind = ResponseKind::Native;
  std::string model;          // "model" (alias or model file name)
  std::string completion_id;  // OpenAI "id": "cmpl-..." / "chatcmpl-..."
  std::string fingerprint;    // OpenAI "system_fingerprint"
  int64_t created = 0;        // OpenAI "created" (unix seconds)
  CompletionParams params;
  std::string prompt_text;    // native final "prompt" (the prompt detokenized)
  ChatParseOptions chat;      // chat: how the output splits into reasoning, content and tool calls
  Json request_echo;          // Responses: the request fields its response object repeats
  int index = 0;              // "index": the choice (OpenAI `n`) or the prompt (a list of prompts)
};

// A streamed chat completion's parse state: the text so far, what the client was sent, and
// probabilities not sent yet.
struct ChatStream {
  std::string text;
  ChatStreamDiff diff;
  std::vector<TokenProbs> pending_probs;
};

// return_progress: llama-server's prompt_progress object, and the chunk of an event with progress
// set (native and OpenAI; the Responses API's event is openai_responses.h's).
Json prompt_progress_json(const PromptProgress& pp);
Json progress_chunk(const TokenEvent& t, const ResponseInfo& info);

// OpenAI finish_reason: "stop" for an end-of-generation token or a stop string, else "length".
const char* finish_reason(StopType stop);
// {completion_tokens, prompt_tokens, total_tokens, prompt_tokens_details: {cached_tokens}}
Json usage_json(const FinalResult& r);

// Native /completion.
Json native_partial_json(const TokenEvent& t, const ResponseInfo& info);
// With info.params.stream the content and tokens were already streamed and are left empty.
Json native_final_json(const FinalResult& r, const ResponseInfo& info);

// OpenAI /v1/completions.
Json oai_completion_chunk_json(const TokenEvent& t, const ResponseInfo& info);
Json oai_completion_final_json(const FinalResult& r, const ResponseInfo& info);

// OpenAI /v1/chat/completions. A streamed token gives one or two chunks (the first carries the
// assistant role); the end gives the finish chunk (with timings) and, with include_usage, a
// usage chunk with empty choices.
// With tools or reasoning, deltas carry reasoning_content / content / tool_calls as parsed so far.
std::vector<Json> oai_chat_token_chunks(const TokenEvent& t, const ResponseInfo& info, bool first, ChatStream& cs);
std::vector<Json> oai_chat_final_chunks(const FinalResult& r, const ResponseInfo& info, ChatStream& cs);
Json oai_chat_final_json(const FinalResult& r, const ResponseInfo& info);

// "cmpl-" / "chatcmpl-" followed by 32 random alphanumerics, as llama-server's ids.
std::string make_completion_id(const std::string& prefix);

}  // namespace agentkv::server
