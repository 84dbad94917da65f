#include "tools/commands.h"

namespace agentkv::tools {
std::vector<Command>& commands() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace agentkv::tools
