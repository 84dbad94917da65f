#include "tools/quality_answer.h"

#include <algorithm>

#include "agentkv/error.h"

namespace agentkv::tools {

std::string answer_passkey(Context& ctx, const PasskeyCase& c, const BeforeLastToken& before_last) {
  const Tokenizer& tok = ctx.model().tokenizer();
  const int64_t n_vocab = ctx.model().n_vocab();
  ctx.memory().clear();
  Batch b;
  MemoryPos next_pos = static_cast<MemoryPos>(c.prompt.size());
  if (before_last) {
    b.add_sequence(c.prompt.data(), c.prompt.size() - 1, 0, 0, false);
    if (ctx.decode(b) != 0) throw Error("a pass-key prompt does not fit in the context");
    const MemoryPos last = before_last(ctx);
    b.clear();
    b.add(c.prompt.back(), last, {0}, true);
    next_pos = last + 1;
  } else {
    b.add_sequence(c.prompt.data(), c.prompt.size(), 0, 0, true);
  }
  if (ctx.decode(b) != 0) throw Error("a pass-key prompt does not fit in the context");
  std::string answer;
  for (int i = 0; i < kPasskeyAnswerTokens && !passkey_decided(answer, c.key); ++i) {
    const float* logits = ctx.last_logits();
    const Token next = static_cast<Token>(std::max_element(logits, logits + n_vocab) - logits);
    if (tok.is_eog(next)) break;
    answer += tok.token_to_piece(next, /*special=*/false);
    b.clear();
    b.add(next, next_pos + i, {0}, true);
    if (ctx.decode(b) != 0) throw Error("a pass-key answer does not fit in the context");
  }
  return answer;
}

}  // namespace agentkv::tools
