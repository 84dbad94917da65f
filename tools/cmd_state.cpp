// agentkv state: inspect state files written by session save (docs/state-format.md).
//   agentkv state info [--model MODEL.gguf] FILE
// Validates the whole file (length, checksum, every section) and prints its format version, model
// fingerprint, contents, KV layout and cell ranges, recurrent cells, tokens, logits and
// checkpoints. With --model, also checks the fingerprint against that model. Exit status 0 when
// the file is valid (and matches the model), 1 otherwise.
#include <cinttypes>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/session_state.h"
#include "tools/commands.h"

namespace agentkv::tools {
namespace {

void usage() {
  std::fprintf(stderr,
               "usage: agentkv state info [--model MODEL.gguf] FILE\n"
               "  validates a state file and prints its version, model fingerprint, sequence or\n"
               "  whole memory, KV types and cell ranges, recurrent cells, tokens, logits, checkpoints\n"
               "  --model  also check that the state was saved by this model\n");
}

int info(const std::vector<std::string>& argv) {
  std::string model_path, path;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--model" || argv[i] == "-m") {
      if (i + 1 >= argv.size()) throw std::invalid_argument("option --model needs a value");
      model_path = argv[++i];
    } else if (!argv[i].empty() && argv[i][0] == '-') {
      throw std::invalid_argument("unknown option '" + argv[i] + "'");
    } else if (path.empty()) {
      path = argv[i];
    } else {
      throw std::invalid_argument("more than one state file given");
    }
  }
  if (path.empty()) {
    usage();
    return 1;
  }
  const std::vector<uint8_t> blob = read_state_file(path);
  const StateSummary state = summarize_state(blob, "state file " + path);
  std::printf("file: %s\n%s", path.c_str(), state.description.c_str());
  if (model_path.empty()) return 0;
  const auto model = Model::load(model_path);
  const uint64_t fp = model_fingerprint(*model);
  if (fp != state.fingerprint) {
    std::printf("model %s: fingerprint %016" PRIx64 " does NOT match\n", model_path.c_str(), fp);
    return 1;
  }
  std::printf("model %s: fingerprint matches\n", model_path.c_str());
  return 0;
}

int cmd_state(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    usage();
    return argv.empty() ? 1 : 0;
  }
  if (argv[0] != "info") {
    std::fprintf(stderr, "agentkv state: unknown subcommand '%s'\n", argv[0].c_str());
    usage();
    return 1;
  }
  try {
    return info(std::vector<std::string>(argv.begin() + 1, argv.end()));
  } catch (const Error& e) {
    std::fprintf(stderr, "agentkv state: %s\n", e.what());
    return 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "agentkv state: %s\n", e.what());
    return 1;
  }
}

}  // namespace

static Registrar reg("state", cmd_state);

}  // namespace agentkv::tools
