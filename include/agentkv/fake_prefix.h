// A depth without computing it, for timing (docs/memory-semantics.md; the server's
// n_fake_cached, `agentkv bench --fake-depth`): a sequence given n positions of zero K/V rows (and
// a zero recurrent state) attends over them as over n decoded tokens, at the cost of placing them
// only. Beside Context rather than in it: nothing that decodes real text calls these.
#pragma once
#include "agentkv/memory.h"

namespace agentkv {

class Context;

// Gives the empty sequence seq positions [0, n) of zero rows, as if n tokens had been decoded.
// Throws agentkv::Error when seq is not empty or the memory lacks n empty cells (nothing changes).
void seq_fake_prefix(Context& ctx, MemorySeqId seq, MemoryPos n);
// Touches every page of the KV rows, so a fake depth (rows never written) is backed by memory as
// a computed one is, not by the shared zero page. Nothing without a KV cache.
void prefault_kv(Context& ctx);

}  // namespace agentkv
