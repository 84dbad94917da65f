// libFuzzer target for the GGUF reader. Any input either parses or is refused with agentkv::Error;
// anything else (a crash, a sanitizer report, another exception, a broken invariant) is a finding.
// Parsed files are also touched everywhere and rewritten through the Writer, which must reproduce them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "agentkv/error.h"
#include "gguf/gguf.h"

using namespace agentkv::gguf;

namespace {

volatile uint64_t g_sink;  // keeps the reads below from being optimised away

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) std::abort(); \
  } while (0)

void touch(const Value& v) {
  uint64_t h = static_cast<uint64_t>(v.type) + v.array_size();
  if (const auto* s = std::get_if<std::string>(&v.scalar)) h += s->size() ? static_cast<uint8_t>(s->back()) : 0;
  for (const auto& s : v.str_array) h += s.size() ? static_cast<uint8_t>(s.front()) : 1;
  for (int64_t i : v.int_array) h += static_cast<uint64_t>(i);
  for (uint64_t u : v.uint_array) h += u;
  for (double d : v.float_array) h += d == d;
  for (const auto& inner : v.nested) touch(inner);
  g_sink = g_sink + h;
}

template <class F>
void call_getter(F&& f) {
  try {
    f();
  } catch (const agentkv::Error&) {
    // A typed getter refusing a value of another type is expected.
  }
}

void touch_everything(const Reader& r) {
  for (const auto& entry : r.metadata().entries()) {
    const std::string& key = entry.first;  // a named reference: lambdas cannot capture bindings in clang 14
    const Value& v = entry.second;
    FUZZ_CHECK(r.metadata().find(key) == &v);
    touch(v);
    call_getter([&] { g_sink = g_sink + r.metadata().get_uint(key).value_or(0); });
    call_getter([&] { g_sink = g_sink + static_cast<uint64_t>(r.metadata().get_int(key).value_or(0)); });
    call_getter([&] { g_sink = g_sink + static_cast<uint64_t>(r.metadata().get_float(key).value_or(0) != 0); });
    call_getter([&] { g_sink = g_sink + r.metadata().get_bool(key).value_or(false); });
    call_getter([&] { g_sink = g_sink + r.metadata().get_string(key).value_or("").size(); });
    call_getter([&] { g_sink = g_sink + r.metadata().get_string_array(key).value_or(std::vector<std::string>{}).size(); });
    call_getter([&] { g_sink = g_sink + r.metadata().get_int_array(key).value_or(std::vector<int64_t>{}).size(); });
    call_getter([&] { g_sink = g_sink + r.metadata().get_float_array(key).value_or(std::vector<double>{}).size(); });
  }
  FUZZ_CHECK(r.alignment() != 0 && (r.alignment() & (r.alignment() - 1)) == 0);
  for (const auto& t : r.tensors()) {
    FUZZ_CHECK(r.find_tensor(t.name) == &t);
    FUZZ_CHECK(&r.require_tensor(t.name, std::span(t.ne).first(t.n_dims)) == &t);
    FUZZ_CHECK(t.data >= r.base() && t.nbytes <= r.file_size() &&
               static_cast<uint64_t>(t.data - r.base()) <= r.file_size() - t.nbytes);
    FUZZ_CHECK(t.nbytes == agentkv::ggml_row_size(t.type, t.ne[0]) * (t.n_elements() / t.ne[0]));
    uint64_t sum = 0;
    for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
    g_sink = g_sink + sum + agentkv::ggml_type_name(t.type).size();
  }
}

// Everything the reader accepted, written again, must read back the same.
void check_rewrite(const Reader& r) {
  Writer w;
  for (const auto& [key, v] : r.metadata().entries()) w.set_value(key, v);
  for (const auto& t : r.tensors())
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                 std::vector<uint8_t>(t.data, t.data + t.nbytes));
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto again = Reader::from_memory(bytes, "rewritten.gguf");
  FUZZ_CHECK(again->metadata().entries().size() == r.metadata().entries().size());
  FUZZ_CHECK(again->alignment() == r.alignment());
  FUZZ_CHECK(again->tensors().size() == r.tensors().size());
  for (size_t i = 0; i < r.tensors().size(); ++i) {
    const TensorInfo& a = r.tensors()[i];
    const TensorInfo& b = again->tensors()[i];
    FUZZ_CHECK(a.name == b.name && a.type == b.type && a.ne == b.ne && a.nbytes == b.nbytes);
    FUZZ_CHECK(std::equal(a.data, a.data + a.nbytes, b.data));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<Reader> reader;
  try {
    reader = Reader::from_memory(std::span<const uint8_t>(data, size), "fuzz.gguf");
  } catch (const agentkv::Error&) {
    return 0;  // refused cleanly
  }
  touch_everything(*reader);
  check_rewrite(*reader);  // an Error here is a finding: libFuzzer reports the uncaught exception
  return 0;
}
