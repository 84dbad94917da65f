// `agentkv serve`: an HTTP server compatible with llama-server's native API and the OpenAI API,
// over one model, N slots and one scheduler thread (scheduler.h). docs/server.md describes the
// endpoints, fields and decisions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/kv_options.h"
#include "server/completion_params.h"

namespace agentkv::server {

struct ServerConfig {
  std::string model_path;
  std::string alias;                 // model names, comma-separated; responses use the first (sorted); default: the file name
  std::string tags;                  // --tags a,b: informational, listed by /models
  std::string host = "127.0.0.1";    // loopback unless asked otherwise
  int port = 8080;                   // 0: any free port (the log line says which)
  std::string api_key;               // when set, required on all but health, the model list and the web UI page
  bool metrics = false;              // GET /metrics
  int n_slots = 4;
  uint32_t n_ctx = 4096;             // 0: the model's training context
  uint32_t n_ubatch = 512;
  int n_threads = 0;                 // 0: hardware concurrency
  KvOptions kv;                      // -ctk, -ctv, --kv-* (tools/kv_flags.h); load() sets unified and query_window
  size_t max_body_bytes = 16u << 20;
  double slot_similarity = 0.10;     // llama-server's --slot-prompt-similarity
  int http_threads = 0;              // connections served at once, one thread each; 0: 256
  double request_timeout_s = 30.0;   // a request's line, headers and body must arrive within this
  std::vector<std::string> cors_origins;   // origins allowed cross-origin requests ("*": any)
  std::vector<std::string> allowed_hosts;  // Host names accepted besides localhost / the bind address ("*": any)
  bool slots_show_prompts = false;   // GET /slots shows prompt text (also when an API key is set)
  std::string slot_save_path;        // folder of slot state files; "" disables save/restore by file
  size_t checkpoint_bytes = 256u << 20;  // hybrid models: RAM for context checkpoints
  size_t cache_ram_bytes = 0;        // KV room for cached pages beyond n_ctx; 0: none
  std::string cache_redis;           // redis://HOST[:PORT][/DB]: the shared page tier; empty: none
  bool embeddings = false;           // --embedding: an embedding server (no completions)
  std::string pooling;               // --pooling none|mean|cls|last; "": the model's own (none without one)
  std::string cache_dir;             // folder of the disk page tier (restarts find their pages); empty: none
  uint64_t cache_dir_bytes = 8ull << 30;  // the disk tier's bound
  uint64_t cache_warm_bytes = 0;     // --cache-warm: compressed page records kept in RAM; 0: no warm tier
  std::string cache_warm_type = "exact";  // --cache-warm-type: exact, or the KV type rows are requantized to
  bool context_shift = false;        // --context-shift: generation at n_ctx drops the middle and goes on
  std::string kv_evict = "positional";  // --kv-evict: which positions a shift drops (agentkv/retention.h)
  uint32_t kv_budget = 0;            // --kv-budget TOKENS: shift a generating sequence at this size (0: at n_ctx)
  bool verbose = false;              // --verbose: OpenAI responses carry "__verbose" unless a request says no
  bool webui = true;                 // GET /: the web UI (--no-webui: a 404)
  int sleep_idle_seconds = -1;       // --sleep-idle-seconds: unload the model after so long without requests; -1: never
  // Vertex AI's prediction protocol (AIP_MODE=PREDICTION): a POST route whose "instances" are
  // requests to the other routes, and another GET route answering as /health. "": none.
  std::string predict_route;
  std::string predict_health_route;
  bool share_prefixes = true;        // the prefix index across slots (scheduler.h)
  // Request defaults (llama-server's --n-predict, --temp, --seed). n_predict > 0 also caps what
  // a request may ask for, as in llama-server.
  int32_t n_predict = -1;
  float temperature = 0.8f;
  int64_t seed = -1;                 // -1: a random seed per request
  bool endpoint_slots = true;        // GET /slots (--no-slots: 501)
  std::string chat_template_source;  // --chat-template(-file): the template to use; "": the model's own
  std::string mmproj_path;           // --mmproj: the vision projector (docs/vision.md); "": text only
  std::string media_path;            // --media-path: images may be file://RELATIVE under it; "": none
  size_t image_cache_bytes = 256u << 20;  // --image-cache-mib: encoded images kept by file content
  std::string reasoning_format;      // --reasoning-format: requests' default reasoning_format; "": auto
  int32_t reasoning_budget = -1;     // --reasoning-budget: chat requests' default reasoning_budget_tokens; -1: none
  int enable_thinking = -1;          // --reasoning on (1) / off (0): chat_template_kwargs.enable_thinking; -1: the template's
  // Speculative decoding (--spec-type, docs/speculative.md): requests' default drafts per step at
  // most (0: off) and at least (--spec-draft-n-max / --draft-max, --spec-draft-n-min), where they
  // come from, and a draft model's confidence floor (--spec-draft-p-min).
  int32_t spec_n_max = 0;
  int32_t spec_n_min = 0;
  SpecSources spec_sources;
  float spec_p_min = 0.75f;
  bool spec_adaptive = true;     // --no-spec-adaptive: requests' speculative.adaptive default false
  std::string draft_model_path;  // -md: the draft model (draft-simple); "": none
  int draft_threads = 0;         // -td: its threads (0: --threads')
  GgmlType draft_type_k = GgmlType::F16, draft_type_v = GgmlType::F16;  // -ctkd / -ctvd: its K/V rows
};

// Listens, loads the model (answering 503 meanwhile), serves until SIGINT or SIGTERM.
// Returns the process exit code.
int run_server(const ServerConfig& config);

}  // namespace agentkv::server
