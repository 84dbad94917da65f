// Registry of `agentkv` subcommands; each lives in its own tools/cmd_*.cpp.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace agentkv::tools {

struct Command {
  std::string name;
  std::function<int(const std::vector<std::string>&)> fn;
};

// Each cmd_*.cpp registers itself with a static Registrar.
std::vector<Command>& commands();
struct Registrar {
  Registrar(std::string name, std::function<int(const std::vector<std::string>&)> fn) {
    commands().push_back({std::move(name), std::move(fn)});
  }
};

}  // namespace agentkv::tools
