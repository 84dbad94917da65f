// libFuzzer target for the JSON request layer of `agentkv serve`: what a handler does with a body
// before the scheduler sees it. The input is split at its first newline into a header value (run
// through every check of request_guard.h) and a body, which goes through parse_body_object, the
// completion fields, the prompt forms, and the model's chat template (ChatFormatter over the
// fixture model's tokenizer and template, as /v1/chat/completions and /apply-template do),
// then tokenization. A refusal is an HttpError of a 4xx status; anything else (a crash, a
// sanitizer report, a 5xx, another exception such as nlohmann's type_error) is a finding.
//
// The model: $AGENTKV_FUZZ_MODEL, else ../shared/fixtures/models/qwen3-micro.gguf; without it the
// ChatML template and no tokenizer.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "agentkv/error.h"
#include "gguf/gguf.h"
#include "server/agent_request.h"
#include "server/anthropic_messages.h"
#include "server/chat_formatter.h"
#include "server/embeddings.h"
#include "server/image_parts.h"
#include "server/infill.h"
#include "server/openai_responses.h"
#include "server/completion_params.h"
#include "server/json_fields.h"
#include "server/request_guard.h"
#include "server/server_error.h"
#include "agentkv/chat_template.h"
#include "agentkv/tokenizer.h"

using namespace agentkv;
using namespace agentkv::server;

namespace {

std::unique_ptr<gguf::Reader> g_gguf;
std::unique_ptr<Tokenizer> g_tok;
std::unique_ptr<ChatFormatter> g_chat;
volatile size_t g_sink;

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) std::abort(); \
  } while (0)

void guards(std::string_view header) {
  OriginPolicy p;
  p.bind_host = "0.0.0.0";
  p.allowed_hosts = {"agentkv.internal"};
  p.cors_origins = {"http://app.example"};
  g_sink = g_sink + json_nesting_depth(header) + parse_content_length(header).value_or(0) +
           is_json_content_type(header) + constant_time_equal(header, "sesame") + host_of(header).value_or("").size() +
           host_allowed(p, header, true) + origin_allowed(p, header, "localhost:8080");
  p.bind_host = "127.0.0.1";
  g_sink = g_sink + host_allowed(p, header, true);
}

// The other request shapes a handler converts or parses before the scheduler: Anthropic Messages and
// OpenAI Responses (converted to a chat request, then rendered), embeddings and /infill.
void other_shapes(const Json& j) {
  auto guarded = [](auto&& f) {
    try {
      f();
    } catch (const HttpError& e) {
      FUZZ_CHECK((http_status(e.type()) >= 400 && http_status(e.type()) < 500) || e.type() == ErrorType::NotSupported);
    } catch (const Error&) {
    }
  };
  guarded([&] {
    const Json chat = anthropic_to_chat_request(j, AnthropicEndpoint::Messages);
    if (g_chat) g_sink = g_sink + g_chat->apply(chat).size();
  });
  guarded([&] {
    const Json chat = responses_to_chat_request(j);
    if (g_chat) g_sink = g_sink + g_chat->apply(chat).size();
  });
  // The agent fields (grammar, json_schema, response_format, tools, tool_choice), as a chat
  // handler reads them, for every tool-call format.
  guarded([&] {
    check_known_fields(j, Endpoint::OaiChat);
    CompletionParams params = parse_completion_params(j, 4, g_tok ? g_tok->n_vocab() : 1000);
    parse_constraints(j, Endpoint::OaiChat, params);
    for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::QwenXml, ToolFormat::Llama3Json, ToolFormat::MistralNemo,
                         ToolFormat::MistralArgs, ToolFormat::MistralCallId}) {
      CompletionParams with_tools = params;
      g_sink = g_sink + parse_chat_options(j, f, "<think>\n", with_tools).tools.size() + with_tools.grammar.triggers.size();
    }
  });
  if (!g_tok) return;
  for (EmbeddingApi api : {EmbeddingApi::Native, EmbeddingApi::OpenAi})
    guarded([&] {
      const EmbeddingRequest r = parse_embedding_request(j, *g_tok, api, Pooling::Mean);
      std::vector<std::vector<std::vector<float>>> rows(r.inputs.size(), {{0.5f, -0.25f}});
      g_sink = g_sink + embedding_response(api, r, rows, Pooling::Mean, "m").dump().size();
    });
  guarded([&] {
    const InfillRequest r = parse_infill_request(j, *g_tok);
    g_sink = g_sink + format_infill(*g_tok, r, 256, 16, 1024).size();
  });
}

void request(const std::string& body) {
  const Json j = parse_body_object(body);
  other_shapes(j);
  const CompletionParams params = parse_completion_params(j, 4, g_tok ? g_tok->n_vocab() : 1000);
  g_sink = g_sink + params.to_json().size();
  std::vector<PromptPart> parts;
  if (has_field(j, "messages")) {
    if (g_chat) {
      parts.push_back({g_chat->apply(j), -1});
    }
  } else if (has_field(j, "prompt")) {
    // The completion routes' reading: prompt objects may carry multimodal_data (decoded here; no
    // --media-path, so file:// is refused without touching the disk).
    for (const Json& item : prompt_items(j.at("prompt"))) {
      const std::vector<PromptPart> prompt = parse_prompt(item, /*media_allowed=*/true);
      parts.insert(parts.end(), prompt.begin(), prompt.end());
      for (const auto& file : prompt_media(item, MediaSource{1u << 20, ""})) g_sink = g_sink + file.size();
    }
  }
  if (g_tok && !parts.empty()) {
    size_t text = 0;
    for (const PromptPart& p : parts) text += p.text.size();
    if (text <= 4096) g_sink = g_sink + tokenize_prompt(*g_tok, parts, true).size();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("AGENTKV_FUZZ_MODEL");
  const std::string path = env ? env : "../shared/fixtures/models/qwen3-micro.gguf";
  try {
    g_gguf = gguf::Reader::open(path);
    g_tok = Tokenizer::from_gguf(*g_gguf);
    g_chat = std::make_unique<ChatFormatter>(*g_tok);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "request_fuzz: no model (%s): ChatML only, no tokenizer\n", e.what());
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nl = input.find('\n');
  guards(std::string_view(input).substr(0, nl == std::string::npos ? input.size() : nl));
  const std::string body = nl == std::string::npos ? input : input.substr(nl + 1);
  try {
    request(body);
  } catch (const HttpError& e) {
    FUZZ_CHECK(http_status(e.type()) >= 400 && http_status(e.type()) < 500);
  } catch (const Error&) {
    // agentkv::Error: refused input, answered 400 by the server
  }
  return 0;
}
