// agentkv info: prints a GGUF's header, every metadata key (type and value; long strings and arrays
// abbreviated unless --full) and its tensor table with totals.
//   agentkv info [--full] MODEL.gguf
#include <cstdio>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/gguf_info.h"
#include "tools/commands.h"

namespace agentkv::tools {
namespace {

void usage() {
  std::fprintf(stderr,
               "usage: agentkv info [--full] MODEL.gguf\n"
               "  prints the GGUF version, alignment, every metadata key with its type and value,\n"
               "  and the tensor table (name, type, shape, offset, bytes) with totals\n"
               "  --full  print long strings and arrays completely\n");
}

int cmd_info(const std::vector<std::string>& args) {
  bool full = false;
  std::string path;
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      usage();
      return 0;
    }
    if (a == "--full") {
      full = true;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "agentkv info: unknown option '%s'\n", a.c_str());
      usage();
      return 1;
    } else if (path.empty()) {
      path = a;
    } else {
      std::fprintf(stderr, "agentkv info: one model file at a time\n");
      return 1;
    }
  }
  if (path.empty()) {
    usage();
    return 1;
  }
  try {
    std::fputs(describe_gguf(path, full).c_str(), stdout);
  } catch (const Error& e) {
    std::fprintf(stderr, "agentkv info: %s\n", e.what());
    return 1;
  }
  return 0;
}

static Registrar reg("info", cmd_info);

}  // namespace
}  // namespace agentkv::tools
