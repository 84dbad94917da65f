// Minimal command-line option parsing for the agentkv subcommands.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>


namespace agentkv::tools {

class Args {
 public:
  explicit Args(std::vector<std::string> args) : args_(std::move(args)), used_(args_.size(), false) {}

  bool flag(const std::string& name, const std::string& alias = "") {
    for (size_t i = 0; i < args_.size(); ++i)
      if (!used_[i] && (args_[i] == name || (!alias.empty() && args_[i] == alias))) {
        used_[i] = true;
        return true;
      }
    return false;
  }
  std::string str(const std::string& name, const std::string& alias, const std::string& def) {
    for (size_t i = 0; i < args_.size(); ++i)
      if (!used_[i] && (args_[i] == name || (!alias.empty() && args_[i] == alias))) {
        if (i + 1 >= args_.size()) throw std::invalid_argument("option " + name + " needs a value");
        used_[i] = used_[i + 1] = true;
        return args_[i + 1];
      }
    return def;
  }
  // An option whose value may be left out ("-fa" or "-fa on"): the next argument is its value only
  // when it is one of `values`. nullopt when the option is absent, "" when it has no value.
  std::optional<std::string> optional_value(const std::string& name, const std::string& alias,
                                            const std::vector<std::string>& values) {
    for (size_t i = 0; i < args_.size(); ++i)
      if (!used_[i] && (args_[i] == name || (!alias.empty() && args_[i] == alias))) {
        used_[i] = true;
        if (i + 1 < args_.size() && !used_[i + 1] &&
            std::find(values.begin(), values.end(), args_[i + 1]) != values.end()) {
          used_[i + 1] = true;
          return args_[i + 1];
        }
        return std::string();
      }
    return std::nullopt;
  }
  long long num(const std::string& name, const std::string& alias, long long def) {
    const std::string s = str(name, alias, "");
    if (s.empty()) return def;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (*end) throw std::invalid_argument("option " + name + ": '" + s + "' is not an integer");
    return v;
  }
  double real(const std::string& name, const std::string& alias, double def) {
    const std::string s = str(name, alias, "");
    if (s.empty()) return def;
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (*end) throw std::invalid_argument("option " + name + ": '" + s + "' is not a number");
    return v;
  }
  // Comma-separated integers ("0,4096").
  std::vector<long long> nums(const std::string& name, const std::string& alias, std::vector<long long> def) {
    const std::string s = str(name, alias, "");
    if (s.empty()) return def;
    std::vector<long long> out;
    size_t start = 0;
    while (start <= s.size()) {
      size_t comma = s.find(',', start);
      const std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      char* end = nullptr;
      out.push_back(std::strtoll(part.c_str(), &end, 10));
      if (part.empty() || *end) throw std::invalid_argument("option " + name + ": bad list '" + s + "'");
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return out;
  }
  // Throws on any argument no option consumed.
  void finish() const {
    for (size_t i = 0; i < args_.size(); ++i)
      if (!used_[i]) throw std::invalid_argument("unknown argument '" + args_[i] + "'");
  }

 private:
  std::vector<std::string> args_;
  std::vector<bool> used_;
};

}  // namespace agentkv::tools
