// A GGUF file described for a reader (`agentkv info`): header, every metadata key with its type
// and value (long strings and arrays abbreviated unless `full`), and the tensor table with totals.
#pragma once
#include <string>

namespace agentkv {

// Several lines, each ending in '\n'. Throws agentkv::Error for a file that is no valid GGUF.
std::string describe_gguf(const std::string& path, bool full);

}  // namespace agentkv
