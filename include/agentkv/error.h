// One exception type for input the engine refuses (bad files, bad requests, bad state blobs).
// Its message is meant for the user: it names the file / key / tensor at fault.
#pragma once
#include <stdexcept>
#include <string>

namespace agentkv {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace agentkv
