// GBNF for JSON numbers between bounds: what enforces a schema's minimum / maximum /
// exclusiveMinimum / exclusiveMaximum. Integers: every bound (a fractional one rounds inward).
// Numbers: whole-number bounds (inclusive or exclusive), written without an exponent; other bounds
// are an agentkv::Error for the caller to report. Digit counts stay within the unbounded
// rules' (16 integer digits, 16 fraction digits), as llama.cpp's integral-part.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace agentkv::grammar {

struct NumberBound {
  int64_t value = 0;
  bool exclusive = false;
};

// The integers in [lo, hi] (unbounded where absent), as one GBNF expression (no trailing space).
// Throws agentkv::Error for an empty range or a bound past 16 digits.
std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

// The numbers between the bounds, as one GBNF expression (no trailing space). Throws
// agentkv::Error for an empty range or a bound past 16 digits.
std::string number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi);

}  // namespace agentkv::grammar
