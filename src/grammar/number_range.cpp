#include "grammar/number_range.h"

#include <algorithm>
#include <vector>

#include "agentkv/error.h"

namespace agentkv::grammar {
namespace {

constexpr uint64_t kMaxMagnitude = 9999999999999999ull;  // 16 digits, as the unbounded rules allow

std::string digits(char lo, char hi) {
  return lo == hi ? "[" + std::string(1, lo) + "]" : "[" + std::string(1, lo) + "-" + std::string(1, hi) + "]";
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// The decimal strings between a and b, which have the same length (a <= b), digit by digit: the
// first digit at a's, in between, or at b's, each followed by what the rest may be.
std::string same_length_range(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (n == 1) return digits(a[0], b[0]);
  const std::string rest_a = a.substr(1), rest_b = b.substr(1);
  if (a[0] == b[0]) return digits(a[0], a[0]) + " " + same_length_range(rest_a, rest_b);
  const bool a_is_lowest = rest_a.find_first_not_of('0') == std::string::npos;   // d00…0
  const bool b_is_highest = rest_b.find_first_not_of('9') == std::string::npos;  // d99…9
  std::vector<std::string> alts;
  char middle_lo = static_cast<char>(a[0] + 1), middle_hi = static_cast<char>(b[0] - 1);
  if (a_is_lowest) {
    middle_lo = a[0];
  } else {
    alts.push_back(digits(a[0], a[0]) + " " + same_length_range(rest_a, std::string(n - 1, '9')));
  }
  if (b_is_highest) middle_hi = b[0];
  if (middle_lo <= middle_hi) alts.push_back(digits(middle_lo, middle_hi) + " [0-9]{" + std::to_string(n - 1) + "}");
  if (!b_is_highest) alts.push_back(digits(b[0], b[0]) + " " + same_length_range(std::string(n - 1, '0'), rest_b));
  return alternatives(alts);
}

// The non-negative integers in [a, b] without leading zeros (a <= b <= kMaxMagnitude).
std::string unsigned_range(uint64_t a, uint64_t b) {
  const std::string sa = std::to_string(a), sb = std::to_string(b);
  std::vector<std::string> alts;
  for (size_t len = sa.size(); len <= sb.size(); ++len) {
    const std::string lo = len == sa.size() ? sa : "1" + std::string(len - 1, '0');
    const std::string hi = len == sb.size() ? sb : std::string(len, '9');
    alts.push_back(same_length_range(lo, hi));
  }
  return alternatives(alts);
}

uint64_t magnitude(int64_t v) {
  const uint64_t m = v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
  if (m > kMaxMagnitude) throw Error("json_schema: bound " + std::to_string(v) + " has more than 16 digits");
  return m;
}

// A bound of the magnitudes on one side of zero.
struct Edge {
  uint64_t value = 0;
  bool open = false;
};

const char* const kAnyFraction = "(\".\" [0-9]{1,16})?";
const char* const kZeroFraction = "(\".\" [0]{1,16})?";
const char* const kNonzeroFraction = "\".\" [0]{0,15} [1-9] [0-9]{0,15}";

// Numbers x >= 0 (written without a sign) with lo <= x <= hi (open edges exclude the value; no
// hi: unbounded); the empty string when there are none.
std::string magnitude_interval(Edge lo, std::optional<Edge> hi) {
  auto integer = [](uint64_t v) { return "\"" + std::to_string(v) + "\""; };
  std::vector<std::string> alts;
  const std::string at_lo = integer(lo.value) + " " + (lo.open ? kNonzeroFraction : kAnyFraction);
  if (!hi) {
    alts.push_back(at_lo);
    if (lo.value < kMaxMagnitude) alts.push_back(unsigned_range(lo.value + 1, kMaxMagnitude) + " " + kAnyFraction);
  } else if (lo.value < hi->value) {
    alts.push_back(at_lo);
    if (lo.value + 1 <= hi->value - 1) alts.push_back(unsigned_range(lo.value + 1, hi->value - 1) + " " + kAnyFraction);
    if (!hi->open) alts.push_back(integer(hi->value) + " " + kZeroFraction);
  } else if (lo.value == hi->value && !lo.open && !hi->open) {
    alts.push_back(integer(lo.value) + " " + kZeroFraction);
  }
  return alts.empty() ? "" : alternatives(alts);
}

}  // namespace

std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) throw Error("json_schema: minimum " + std::to_string(*lo) + " is above maximum " + std::to_string(*hi));
  if (lo) magnitude(*lo);
  if (hi) magnitude(*hi);
  std::vector<std::string> alts;
  if (!hi || *hi >= 0) alts.push_back(unsigned_range(lo ? static_cast<uint64_t>(std::max<int64_t>(*lo, 0)) : 0, hi ? magnitude(*hi) : kMaxMagnitude));
  if (!lo || *lo < 0) alts.push_back("\"-\" " + unsigned_range(hi && *hi < 0 ? magnitude(*hi) : 1, lo ? magnitude(*lo) : kMaxMagnitude));
  return alternatives(alts);
}

std::string number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
  if (lo) magnitude(lo->value);
  if (hi) magnitude(hi->value);
  std::vector<std::string> alts;
  // x >= 0: from max(lo, 0) up to hi.
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    const Edge from = lo && lo->value >= 0 ? Edge{static_cast<uint64_t>(lo->value), lo->exclusive} : Edge{0, false};
    std::optional<Edge> to;
    if (hi) to = Edge{static_cast<uint64_t>(hi->value), hi->exclusive};
    if (std::string part = magnitude_interval(from, to); !part.empty()) alts.push_back(part);
  }
  // x < 0, written "-" y with y > 0: y from max(-hi, 0) (open at 0: no "-0") up to -lo.
  if (!lo || lo->value < 0) {
    const Edge from = hi && hi->value < 0 ? Edge{magnitude(hi->value), hi->exclusive} : Edge{0, true};
    std::optional<Edge> to;
    if (lo) to = Edge{magnitude(lo->value), lo->exclusive};
    if (std::string part = magnitude_interval(from, to); !part.empty()) alts.push_back("\"-\" " + part);
  }
  if (alts.empty()) throw Error("json_schema: no number lies between the bounds");
  return alternatives(alts);
}

}  // namespace agentkv::grammar
