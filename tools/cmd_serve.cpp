// agentkv serve [-m MODEL] [-c 4096] [-np 4] [-t N] [-ub 512] [-ctk f16] [-ctv f16] [--host 127.0.0.1]
//               [--port 8080] [--api-key KEY] [--metrics] [-a ALIAS] [--max-body BYTES]
//               [-sps 0.10] [--threads-http N] [--slot-save-path DIR] [--ctx-checkpoint-mib 256] [--cache-ram MiB]
//               [--cors ORIGIN] [--allowed-host HOST] [--slots-show-prompts] [--request-timeout 30]
// An HTTP server compatible with llama-server and the OpenAI API (docs/server.md).
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "agentkv/error.h"
#include "agentkv/ggml_type.h"
#include "agentkv/pooling.h"
#include "agentkv/retention.h"
#include "agentkv/numerics.h"
#include "agentkv/speculative.h"
#include "tools/args.h"
#include "tools/kv_flags.h"
#include "tools/commands.h"
#include "tools/default_model.h"
#ifdef AGENTKV_HAVE_HTTPLIB
#include "server/builtin_chat_templates.h"
#include "server/completion_params.h"
#include "server/http_server.h"
#include "agentkv/redis_page_tier.h"
#endif

namespace agentkv::tools {
namespace {

const char* const kUsage =
    "usage: agentkv serve [-m MODEL] [options]\n"
    "  -m, --model PATH                GGUF model (default: the built-in models/default.gguf)\n"
    "  -c, --ctx-size N                context (KV cells) shared by all slots (default 4096; 0 = trained context)\n"
    "  -np, --parallel N               slots: requests served at once (default 4)\n"
    "  -t, --threads N                 compute threads (default: all cores)\n"
    "  -ub, --ubatch-size N            tokens per forward pass and per scheduler step (default 512)\n"
    "  --host HOST                     address to listen on (default 127.0.0.1)\n"
    "  --port N                        port (default 8080; 0 = any free port)\n"
    "  --api-key KEY                   require this key (Authorization: Bearer KEY) on all but /health\n"
    "  --metrics                       enable GET /metrics (Prometheus)\n"
    "  -a, --alias NAME[,NAME...]      model names; responses use the first in sorted order (default: the file name)\n"
    "  --tags TAG[,TAG...]             informational tags, listed by /models\n"
    "  --max-body BYTES                largest request body (default 16777216)\n"
    "  -sps, --slot-prompt-similarity F  prefix share needed to prefer a slot's cache (default 0.10)\n"
    "  --threads-http N                connections served at once, one thread each (default 256)\n"
    "  --request-timeout S             seconds for a request's line, headers and body to arrive (default 30)\n"
    "  --cors ORIGIN                   allow cross-origin requests from ORIGIN (repeatable, comma list; * = any)\n"
    "  --allowed-host HOST             accept this Host header besides localhost and the bind address (* = any)\n"
    "  --slots-show-prompts            GET /slots shows prompt text (it does with --api-key too)\n"
    "  --slot-save-path DIR            enables POST /slots/{id}?action=save|restore|erase|adopt (files in DIR)\n"
    "  --ctx-checkpoint-mib N          RAM for hybrid models' recurrent snapshots on cached page chains, all slots\n"
    "                                  (llama-server's context checkpoints; default 256)\n"
    "  -mm, --mmproj FILE              the model's vision projector (mmproj GGUF, Qwen3.5): chat requests may carry\n"
    "                                  images as data: URLs (docs/vision.md)\n"
    "  --image-cache-mib N             encoded images kept by their file content, LRU (default 256)\n"
    "  -cram, --cache-ram MiB          KV room for cached pages beyond -c: pages no slot uses stay until all of it\n"
    "                                  is taken (default 0: cached pages share the -c cells with the slots)\n"
    "  --cache-redis redis://HOST[:PORT][/DB]  share full KV pages with other instances through Redis (dense models;\n"
    "                                  docs/deploy.md): written as they fill, fetched when a prompt continues them\n"
    "  --chat-template-file FILE       a Jinja chat template to use instead of the model's (a bad one fails the start)\n"
    "  --reasoning-format none|auto|deepseek  requests' default reasoning_format (default auto: <think> parsed)\n"
    "  -rea, --reasoning on|off|auto   chat_template_kwargs.enable_thinking for requests that do not set it\n"
    "  --reasoning-budget N            tokens a chat answer may reason (<think>, gpt-oss's analysis) before its end\n"
    "                                  is forced: -1 no limit (default), 0 none; requests: reasoning_budget_tokens\n"
    "  --embedding, --embeddings       an embedding server: /embedding, /embeddings, /v1/embeddings (completions 501)\n"
    "  --pooling none|mean|cls|last    how an input's token rows become one vector (default: the model's\n"
    "                                  <arch>.pooling_type, else none: per-token rows, native API only)\n"
    "  --cache-dir DIR                 keep KV pages (and hybrid snapshots) on disk in DIR (docs/memory-semantics.md):\n"
    "                                  written as they fill, so a restarted server evaluates only what no run computed\n"
    "  --cache-dir-mib, --cache-disk N bound of --cache-dir in MiB, least recently used pages deleted beyond (default 8192)\n"
    "  --cache-warm MiB                the warm tier: pages the KV pool gave up kept zstd-compressed in RAM, asked\n"
    "                                  before the disk and Redis (default 0: none)\n"
    "  --cache-warm-type exact|q8_0|q4_0  how the warm tier holds K/V: exact (lossless, default) or requantized\n"
    "                                  (smaller, changes outputs: BENCHMARKS.md \"Issue 17: page tiers\")\n"
    "  --batch-invariant               every token's result independent of its batch: a cached prompt gives the\n"
    "                                  bits of an uncached one (kernels/numerics.h; default: llama.cpp's numerics)\n"
    "  --no-share-prefixes             each slot reuses only pages it computed itself (default: one prefix index\n"
    "                                  for all slots: prompts attach the KV pages any slot computed)\n"
    "llama-server options (docs/server.md has the table):\n"
    "  -n, --n-predict N               default and largest number of tokens a request generates (default -1: no limit)\n"
    "  --temp T                        default temperature of requests (default 0.8)\n"
    "  -s, --seed N                    default seed of requests (default -1: random per request)\n"
    "  -b, --batch-size N              logical batch: -ub is lowered to N when larger (agentkv decodes one ubatch a step)\n"
    "  --cors-origins ORIGIN           same as --cors\n"
    "  --chat-template NAME|JINJA      a built-in format instead of the model's template (chatml, llama3,\n"
    "                                  command-r, gemma, phi3, phi4, falcon3, zephyr), or a Jinja template\n"
    "  --jinja, --no-jinja             accepted: agentkv always renders the model's template with its own Jinja\n"
    "  --slots, --no-slots             enable (default) / disable GET /slots (501 when disabled)\n"
    "  -fa, --flash-attn [on|off|auto] accepted: agentkv's CPU attention has one implementation\n"
    "  --kv-unified                    accepted: the memory is always unified (one pool for all slots)\n"
    "  --no-cache-idle-slots           accepted: idle slots' pages stay cached until their cells are needed\n"
    "  --context-shift                 a generation reaching the context drops the middle of its sequence\n"
    "                                  (request fields n_keep / n_discard, as llama-server) and goes on\n"
    "  --kv-evict POLICY               which positions a shift drops: positional (default, llama-server's),\n"
    "                                  sinks, keydiff, snapkv (request field kv_evict; docs/memory-semantics.md)\n"
    "  --kv-budget N                   with --context-shift: a generation shifts when its sequence reaches N\n"
    "                                  positions, before the context is full\n"
    "  -cb, --cont-batching            accepted: agentkv always batches slots continuously\n"
    "  -ngl, --n-gpu-layers N          accepted: agentkv runs on the CPU\n"
    "  --ui, --webui / --no-ui, --no-webui\n"
    "                                  serve (default) / do not serve the web UI at GET /\n"
    "  -v, --verbose                   OpenAI responses carry __verbose (the native response), as llama-server's\n"
    "  --offline                       accepted: agentkv never downloads\n"
    "  --backend-sampling              accepted: agentkv samples on the CPU\n"
    "  --media-path DIR                images may name files under DIR as file://RELATIVE/PATH (llama-server's; no\n"
    "                                  '..', nothing outside DIR even through links; default: file:// refused)\n"
    "  --spec-type TYPES               speculative decoding, comma-separated: ngram-simple, n-gram drafts from\n"
    "                                  each request's own context (also ngram, ngram-map-k, ngram-mod, ...: the\n"
    "                                  same lookup); draft-simple, drafts from the -md model; none: off, the\n"
    "                                  default); output unchanged at any temperature (docs/speculative.md)\n"
    "  -md, --spec-draft-model, --model-draft FILE\n"
    "                                  a draft model with the model's vocabulary (implies --spec-type draft-simple)\n"
    "  --spec-draft-p-min, --draft-p-min P  a draft model's draft ends at its first token less than P probable\n"
    "                                  (default 0.75; request: speculative.p_min)\n"
    "  --no-spec-adaptive              requests draft n_max whenever found (speculative.adaptive false) instead\n"
    "                                  of the length that pays on this machine (tests, benchmarks)\n"
    "  -td, --spec-draft-threads N     the draft model's threads (default: --threads')\n"
    "  -ctkd, -ctvd T                  the draft model's K / V cache types (default f16; as -ctk)\n"
    "  -ngld, --spec-draft-ngl N       accepted: agentkv runs on the CPU\n"
    "  --spec-draft-n-max, --draft-max N  drafts per step at most (default 64, at most 64; 32 for models with\n"
    "                                  sliding-window layers; request: speculative.n_max);\n"
    "                                  how many pay is measured as the server runs (docs/speculative.md)\n"
    "  --spec-draft-n-min, --draft-min N  fewer drafts found than N: none tried (default 0; speculative.n_min)\n"
    "  --sleep-idle-seconds N          unload the model after N s without requests (observers such as /health\n"
    "                                  and /props do not count); the next request loads it again (-1: never)\n"
    "Environment: AIP_MODE=PREDICTION serves Vertex AI's prediction route (AIP_PREDICT_ROUTE, default\n"
    "  /predict; AIP_HEALTH_ROUTE; AIP_HTTP_PORT overrides --port)\n";

int cmd_serve(const std::vector<std::string>& argv) {
  Args a(argv);
  if (a.flag("--help", "-h")) {
    std::fputs(kUsage, stdout);
    std::fputs(kKvFlagsUsage, stdout);
    return 0;
  }
#ifdef AGENTKV_HAVE_HTTPLIB
  server::ServerConfig cfg;
  cfg.model_path = a.str("-m", "--model", "");
  const long long n_ctx = a.num("-c", "--ctx-size", 4096);
  const long long n_slots = a.num("-np", "--parallel", 4);
  cfg.n_threads = static_cast<int>(a.num("-t", "--threads", 0));
  const long long n_ubatch = a.num("-ub", "--ubatch-size", 512);
  cfg.kv = read_kv_flags(a);
  cfg.host = a.str("--host", "", "127.0.0.1");
  const long long port = a.num("--port", "", 8080);
  cfg.api_key = a.str("--api-key", "", "");
  cfg.metrics = a.flag("--metrics");
  cfg.alias = a.str("-a", "--alias", "");
  cfg.tags = a.str("--tags", "", "");
  const long long max_body = a.num("--max-body", "", 16ll << 20);
  cfg.slot_similarity = a.real("-sps", "--slot-prompt-similarity", 0.10);
  cfg.http_threads = static_cast<int>(a.num("--threads-http", "", 0));
  cfg.request_timeout_s = a.real("--request-timeout", "", 30.0);
  cfg.slots_show_prompts = a.flag("--slots-show-prompts");
  cfg.share_prefixes = !a.flag("--no-share-prefixes");
  a.flag("--share-prefixes");  // the old opt-in spelling, now the default
  set_batch_invariant(a.flag("--batch-invariant"));
  auto list = [&](const char* option, std::vector<std::string>& out) {
    for (std::string v = a.str(option, "", ""); !v.empty(); v = a.str(option, "", "")) {
      size_t start = 0;
      while (start <= v.size()) {
        const size_t comma = v.find(',', start);
        std::string item = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        for (char& c : item) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        while (!item.empty() && item.back() == '/') item.pop_back();  // "http://x:1/" names the origin http://x:1
        if (!item.empty()) out.push_back(item);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
  };
  list("--cors", cfg.cors_origins);
  list("--cors-origins", cfg.cors_origins);
  // llama-server's options (docs/server.md, "llama-server flags").
  const long long n_predict = a.num("-n", "--n-predict", -1);
  cfg.temperature = static_cast<float>(a.real("--temp", "", 0.8));
  cfg.seed = a.num("--seed", "-s", -1);
  const long long n_batch = a.num("-b", "--batch-size", 0);
  const std::string chat_template = a.str("--chat-template", "", "");
  cfg.mmproj_path = a.str("--mmproj", "-mm", "");
  cfg.media_path = a.str("--media-path", "", "");
  if (!cfg.media_path.empty() && !std::filesystem::is_directory(cfg.media_path))
    throw std::invalid_argument("--media-path " + cfg.media_path + ": not a directory");
  cfg.image_cache_bytes = static_cast<size_t>(a.num("--image-cache-mib", "", 256)) << 20;
  const std::string chat_template_file = a.str("--chat-template-file", "", "");
  cfg.reasoning_format = a.str("--reasoning-format", "", "");
  const long long reasoning_budget = a.num("--reasoning-budget", "", -1);
  if (reasoning_budget < -1 || reasoning_budget > INT32_MAX)
    throw std::invalid_argument("--reasoning-budget must be -1 (no limit) or a token count");
  cfg.reasoning_budget = static_cast<int32_t>(reasoning_budget);
  const std::string reasoning = a.str("-rea", "--reasoning", "auto");
  if (a.flag("--no-slots")) cfg.endpoint_slots = false;
  if (a.flag("--slots")) cfg.endpoint_slots = true;
  while (a.flag("--jinja") || a.flag("--no-jinja")) {
  }
  // accepted for llama-server command lines (given any number of times); nothing to switch
  while (a.optional_value("-fa", "--flash-attn", {"on", "off", "auto"})) {
  }
  // Continuous batching is how agentkv always schedules; it runs on the CPU (no layers to offload).
  while (a.flag("-cb", "--cont-batching")) {
  }
  if (a.flag("-nocb", "--no-cont-batching"))
    throw std::invalid_argument("--no-cont-batching: agentkv always batches slots continuously");
  a.str("-ngl", "--n-gpu-layers", "");
  a.str("--gpu-layers", "", "");
  while (a.flag("--context-shift")) cfg.context_shift = true;
  while (a.flag("--no-context-shift")) cfg.context_shift = false;
  cfg.kv_evict = a.str("--kv-evict", "", "positional");
  if (!parse_evict_policy(cfg.kv_evict))
    throw std::invalid_argument("--kv-evict " + cfg.kv_evict + ": one of " + kEvictPolicyNames);
  const long long kv_budget = a.num("--kv-budget", "", 0);
  if (kv_budget < 0 || kv_budget > INT32_MAX) throw std::invalid_argument("--kv-budget: a token count");
  cfg.kv_budget = static_cast<uint32_t>(kv_budget);
  if (cfg.kv_budget > 0 && !cfg.context_shift) throw std::invalid_argument("--kv-budget needs --context-shift");
  const std::string spec_type = a.str("--spec-type", "", "");
  try {
    cfg.spec_sources = server::parse_spec_types(spec_type.empty() ? "none" : spec_type);
  } catch (const Error& e) {
    throw std::invalid_argument("--spec-type " + std::string(e.what()));
  }
  cfg.draft_model_path = a.str("--spec-draft-model", "-md", "");
  if (cfg.draft_model_path.empty()) cfg.draft_model_path = a.str("--model-draft", "", "");
  // -md alone drafts with the model; a --spec-type without draft-simple would leave it unused.
  if (!cfg.draft_model_path.empty() && spec_type.empty()) cfg.spec_sources.draft_model = true;
  if (!cfg.draft_model_path.empty() && !cfg.spec_sources.draft_model)
    throw std::invalid_argument("-md: --spec-type " + spec_type + " does not draft with a model (add draft-simple)");
  if (cfg.draft_model_path.empty() && cfg.spec_sources.draft_model)
    throw std::invalid_argument("--spec-type draft-simple needs a draft model (-md FILE)");
  const std::string p_min = a.str("--spec-draft-p-min", "--draft-p-min", "0.75");
  char* p_min_end = nullptr;
  cfg.spec_p_min = std::strtof(p_min.c_str(), &p_min_end);
  if (p_min_end == p_min.c_str() || *p_min_end != '\0' || !(cfg.spec_p_min >= 0.0f && cfg.spec_p_min <= 1.0f))
    throw std::invalid_argument("--spec-draft-p-min must be a probability in [0, 1]");
  while (a.flag("--no-spec-adaptive")) cfg.spec_adaptive = false;
  const long long draft_threads = a.num("--spec-draft-threads", "-td", 0);
  if (draft_threads == 0) cfg.draft_threads = static_cast<int>(a.num("--threads-draft", "", 0));
  else cfg.draft_threads = static_cast<int>(draft_threads);
  if (cfg.draft_threads < 0 || cfg.draft_threads > 1024) throw std::invalid_argument("-td: a thread count");
  std::string type = a.str("--spec-draft-type-k", "-ctkd", "");
  if (type.empty()) type = a.str("--cache-type-k-draft", "", "f16");
  cfg.draft_type_k = parse_kv_cache_type(type, "-ctkd");
  type = a.str("--spec-draft-type-v", "-ctvd", "");
  if (type.empty()) type = a.str("--cache-type-v-draft", "", "f16");
  cfg.draft_type_v = parse_kv_cache_type(type, "-ctvd");
  // Where the draft model's layers go: agentkv runs on the CPU.
  a.str("--spec-draft-ngl", "-ngld", "");
  a.str("--gpu-layers-draft", "--n-gpu-layers-draft", "");
  const long long draft_max = a.num("--spec-draft-n-max", "--draft-max", server::kDefaultDraftMax);
  const long long draft_min = a.num("--spec-draft-n-min", "--draft-min", 0);
  if (draft_max < 0 || draft_max > static_cast<long long>(kMaxDraft))
    throw std::invalid_argument("--spec-draft-n-max must be in [0, " + std::to_string(kMaxDraft) + "]");
  if (draft_min < 0 || draft_min > draft_max) throw std::invalid_argument("--spec-draft-n-min must be in [0, --spec-draft-n-max]");
  cfg.spec_n_max = cfg.spec_sources.any() ? static_cast<int32_t>(draft_max) : 0;
  cfg.spec_n_min = static_cast<int32_t>(draft_min);
  while (a.flag("--no-ui", "--no-webui")) cfg.webui = false;
  while (a.flag("--ui", "--webui")) cfg.webui = true;
  const long long sleep_idle = a.num("--sleep-idle-seconds", "", -1);
  // llama-server samples on the GPU with it; agentkv samples on the CPU either way.
  for (const char* accepted : {"--kv-unified", "--no-cache-idle-slots", "--offline", "--backend_sampling",
                               "--backend-sampling"})
    while (a.flag(accepted)) {
    }
  for (const char* verbose : {"--verbose", "-v", "--log-verbose"})
    while (a.flag(verbose)) cfg.verbose = true;
  list("--allowed-host", cfg.allowed_hosts);
  cfg.slot_save_path = a.str("--slot-save-path", "", "");
  const long long checkpoint_mib = a.num("--ctx-checkpoint-mib", "", 256);
  const long long cache_ram_mib = a.num("-cram", "--cache-ram", 0);
  cfg.cache_redis = a.str("--cache-redis", "", "");
  cfg.cache_dir = a.str("--cache-dir", "", "");
  cfg.embeddings = a.flag("--embedding", "--embeddings");
  if (a.flag("--rerank", "--reranking"))
    throw std::invalid_argument("--reranking: agentkv loads no model with a classification head (pooling 'rank'); "
                                "/rerank answers 501");
  cfg.pooling = a.str("--pooling", "", "");
  if (!cfg.pooling.empty() && !agentkv::parse_pooling(cfg.pooling))
    throw std::invalid_argument("--pooling: expected none, mean, cls or last, not '" + cfg.pooling + "'");
  const long long cache_dir_mib = a.num("--cache-dir-mib", "--cache-disk", 8192);
  const long long cache_warm_mib = a.num("--cache-warm", "", 0);
  cfg.cache_warm_type = a.str("--cache-warm-type", "", "exact");
  if (cfg.cache_warm_type != "exact" && cfg.cache_warm_type != "q8_0" && cfg.cache_warm_type != "q4_0")
    throw std::invalid_argument("--cache-warm-type: exact, q8_0 or q4_0, not '" + cfg.cache_warm_type + "'");
  a.finish();
  if (cache_warm_mib < 0 || cache_warm_mib > (1ll << 24)) throw std::invalid_argument("--cache-warm must be in [0, 16777216]");
  cfg.cache_warm_bytes = static_cast<uint64_t>(cache_warm_mib) << 20;
  if (cfg.cache_warm_type != "exact" && cfg.cache_warm_bytes == 0)
    throw std::invalid_argument("--cache-warm-type " + cfg.cache_warm_type + " needs --cache-warm MiB");
  if (cache_dir_mib < 1 || cache_dir_mib > (1ll << 30)) throw std::invalid_argument("--cache-dir-mib must be in [1, 1073741824]");
  cfg.cache_dir_bytes = static_cast<uint64_t>(cache_dir_mib) << 20;
  if (!cfg.cache_redis.empty()) agentkv::parse_redis_url(cfg.cache_redis);  // a bad URL fails here, not later

  if (checkpoint_mib < 0 || checkpoint_mib > (1ll << 20)) throw std::invalid_argument("--ctx-checkpoint-mib must be in [0, 1048576]");
  cfg.checkpoint_bytes = static_cast<size_t>(checkpoint_mib) << 20;
  if (cache_ram_mib < 0 || cache_ram_mib > (1ll << 24)) throw std::invalid_argument("--cache-ram must be in [0, 16777216]");
  cfg.cache_ram_bytes = static_cast<size_t>(cache_ram_mib) << 20;
  cfg.model_path = resolve_model_path(cfg.model_path);
  if (n_ctx < 0 || n_ctx > (1ll << 24)) throw std::invalid_argument("-c must be in [0, 16777216]");
  if (n_slots < 1 || n_slots > 256) throw std::invalid_argument("-np must be in [1, 256]");
  if (n_ubatch < 1 || n_ubatch > 65536) throw std::invalid_argument("-ub must be in [1, 65536]");
  if (n_batch < 0 || n_batch > 65536) throw std::invalid_argument("-b must be in [1, 65536]");
  if (n_predict < -1 || n_predict > INT32_MAX) throw std::invalid_argument("-n must be -1 (no limit) or a token count");
  if (!(cfg.temperature >= 0.0f && cfg.temperature <= 100.0f)) throw std::invalid_argument("--temp must be in [0, 100]");
  if (cfg.seed < -1 || cfg.seed > 0xFFFFFFFFll) throw std::invalid_argument("--seed must be -1 (random) or in [0, 4294967295]");
  if (!chat_template.empty()) {
    // A built-in format's name, or (as llama-server takes it) a Jinja template itself.
    if (const auto builtin = server::builtin_chat_template(chat_template)) {
      cfg.chat_template_source = *builtin;
    } else if (chat_template.find("{%") != std::string::npos || chat_template.find("{{") != std::string::npos) {
      cfg.chat_template_source = chat_template;
    } else {
      std::string names;
      for (const std::string& n : server::builtin_chat_template_names()) names += (names.empty() ? "" : ", ") + n;
      throw std::invalid_argument("--chat-template '" + chat_template + "': not a built-in template (" + names +
                                  ") nor a Jinja template");
    }
  }
  if (!chat_template_file.empty()) {
    std::ifstream in(chat_template_file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in || text.str().empty())
      throw std::invalid_argument("--chat-template-file: cannot read '" + chat_template_file + "'");
    cfg.chat_template_source = text.str();
  }
  if (!cfg.reasoning_format.empty() && cfg.reasoning_format != "none" && cfg.reasoning_format != "auto" &&
      cfg.reasoning_format != "deepseek")
    throw std::invalid_argument("--reasoning-format must be none, auto or deepseek");
  if (reasoning == "on" || reasoning == "true" || reasoning == "1") cfg.enable_thinking = 1;
  else if (reasoning == "off" || reasoning == "false" || reasoning == "0") cfg.enable_thinking = 0;
  else if (reasoning != "auto") throw std::invalid_argument("--reasoning must be on, off or auto");
  cfg.n_predict = static_cast<int32_t>(n_predict);
  if (sleep_idle < -1 || sleep_idle > 86400 * 365) throw std::invalid_argument("--sleep-idle-seconds must be -1 (never) or in [0, 31536000]");
  cfg.sleep_idle_seconds = static_cast<int>(sleep_idle);
  // Vertex AI custom containers (llama-server's AIP_* variables): the prediction route, a health
  // route, and the port when AIP_HTTP_PORT is set.
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  long long port_value = port;
  if (env("AIP_MODE") == "PREDICTION") {
    cfg.predict_route = env("AIP_PREDICT_ROUTE").empty() ? "/predict" : env("AIP_PREDICT_ROUTE");
    cfg.predict_health_route = env("AIP_HEALTH_ROUTE");
    if (!env("AIP_HTTP_PORT").empty()) {
      try {
        port_value = std::stoll(env("AIP_HTTP_PORT"));
      } catch (const std::exception&) {
        throw std::invalid_argument("AIP_HTTP_PORT must be a port number");
      }
    }
    if (cfg.predict_route[0] != '/' || (!cfg.predict_health_route.empty() && cfg.predict_health_route[0] != '/'))
      throw std::invalid_argument("AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE must be paths starting with '/'");
  }
  if (port_value < 0 || port_value > 65535) throw std::invalid_argument("--port (or AIP_HTTP_PORT) must be in [0, 65535]");
  if (max_body < 1) throw std::invalid_argument("--max-body must be positive");
  if (cfg.n_threads < 0) throw std::invalid_argument("-t must not be negative");
  if (cfg.http_threads < 0 || cfg.http_threads > 65536) throw std::invalid_argument("--threads-http must be in [0, 65536]");
  if (!(cfg.request_timeout_s > 0.0 && cfg.request_timeout_s <= 86400.0))
    throw std::invalid_argument("--request-timeout must be in (0, 86400]");
  if (cfg.slot_similarity < 0.0 || cfg.slot_similarity > 1.0) throw std::invalid_argument("-sps must be in [0, 1]");
  cfg.n_ctx = static_cast<uint32_t>(n_ctx);
  cfg.n_slots = static_cast<int>(n_slots);
  cfg.n_ubatch = static_cast<uint32_t>(n_batch > 0 && n_batch < n_ubatch ? n_batch : n_ubatch);
  cfg.port = static_cast<int>(port_value);
  cfg.max_body_bytes = static_cast<size_t>(max_body);
  return server::run_server(cfg);
#else
  std::fputs("agentkv serve: this build has no HTTP server (it needs libcpp-httplib linked and AGENTKV_HAVE_HTTPLIB "
             "defined; see docs/server.md)\n",
             stderr);
  return 1;
#endif
}

Registrar reg("serve", [](const std::vector<std::string>& args) {
  try {
    return cmd_serve(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "agentkv serve: %s\n", e.what());
    return 1;
  }
});

}  // namespace
}  // namespace agentkv::tools
