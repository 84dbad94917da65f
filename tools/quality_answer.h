// The greedy answer of a model to one pass-key case (docs/quality-bench.md), shared by
// `agentkv bench quality` and `agentkv bench evict`: the prompt is evaluated, optionally changed
// in memory before its last token (an eviction), and up to kPasskeyAnswerTokens tokens are
// generated greedily until the case is decided.
#pragma once
#include <functional>
#include <string>

#include "agentkv/context.h"
#include "tools/quality_passkey.h"

namespace agentkv::tools {

inline constexpr int kPasskeyAnswerTokens = 8;  // the spec's greedy continuation length

// before_last: called after all but the last prompt token are in sequence 0, returns the position
// the last token takes (what the sequence then holds). Empty: the whole prompt in one batch.
using BeforeLastToken = std::function<MemoryPos(Context&)>;
std::string answer_passkey(Context& ctx, const PasskeyCase& c, const BeforeLastToken& before_last = {});

}  // namespace agentkv::tools
