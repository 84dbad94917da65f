// Drafts from a smaller model that shares the target's vocabulary (llama.cpp's `-md` with
// `--spec-type draft-simple`; docs/speculative.md): for each of the target's sequences the draft
// model keeps its own memory of the sequence's tokens, catches up with what the target has
// accepted since (one batch), and proposes its greedy continuation, token by token, while it is
// confident enough. The target verifies the drafts as it verifies n-gram drafts, so the answer is
// the target's whatever the draft model says; a good draft model only makes it come sooner.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "agentkv/context.h"
#include "agentkv/ggml_type.h"
#include "agentkv/model.h"
#include "agentkv/tokenizer.h"

namespace agentkv {

// Why `draft` cannot draft for `target` (llama.cpp's rule: the same tokenizer kind, BOS / EOS
// handling, vocabularies within 128 tokens of each other and the same token texts where both have
// them); empty when it can.
std::string draft_model_mismatch(const Model& draft, const Model& target);

// One sequence's request for drafts (DraftModel::draft, several at once).
struct DraftAsk {
  MemorySeqId seq = 0;
  std::vector<Token> history;  // the sequence as the target holds it, its next token last
  size_t k = 0;                // drafts at most
  float p_min = 0.0f;          // each draft at least this probable under the draft model
  std::vector<Token> drafts;   // the answer
};

struct DraftModelParams {
  uint32_t n_seq = 1;      // the target's sequences it drafts for (ids 0 … n_seq - 1)
  uint32_t n_ctx = 4096;   // K/V cells shared by them (untouched cells cost no memory)
  uint32_t n_ubatch = 512;
  int n_threads = 2;
  GgmlType type_k = GgmlType::F16, type_v = GgmlType::F16;  // its K/V rows (llama.cpp's -ctkd / -ctvd)
};

class DraftModel {
 public:
  // Throws agentkv::Error when the draft model cannot draft for the target (draft_model_mismatch).
  DraftModel(const Model& draft, const Model& target, const DraftModelParams& params);
  ~DraftModel();
  DraftModel(const DraftModel&) = delete;
  DraftModel& operator=(const DraftModel&) = delete;

  // Up to k tokens the draft model expects after `history` (seq's whole token sequence as the
  // target holds it, its next token last), greedy, each one at least p_min probable under the
  // draft model; the first less confident one ends the draft. Empty for a history with image rows
  // (negative ids, which a text model cannot read) or when the draft memory has no room. The draft
  // memory keeps `history` for seq afterwards (not the drafts), so the next call reads only what
  // came after it.
  std::vector<Token> draft(MemorySeqId seq, std::span<const Token> history, size_t k, float p_min);
  // The same for several sequences at once (distinct seqs), as llama.cpp drafts its slots: one
  // batch catches them all up, then one batch per draft position holds every sequence still
  // drafting. Each ask's drafts equal what draft() gives it alone.
  void draft(std::span<DraftAsk> asks);
  // seq's tokens leave the draft memory.
  void forget(MemorySeqId seq);
  // What one draft position has cost lately (ms of the draft model's step over every sequence
  // drafting), 0 before the first draft: what a draft costs besides its row in the target's pass
  // (server/draft_policy.h).
  double ms_per_draft() const { return ms_per_draft_; }
  const Model& model() const { return draft_; }
  // The draft model's forward passes (tokens evaluated: catching up and drafting).
  const DecodeStats& stats() const { return ctx_.stats(); }

 private:
  // Makes the draft memory hold exactly history for seq, the last token's logits out; false when
  // it found no room even after dropping the other sequences.
  bool catch_up(MemorySeqId seq, std::span<const Token> history);
  // The positions of history the draft memory must evaluate for seq: from the returned index on
  // (earlier ones it holds; what it held beyond them is dropped).
  size_t keep_common(MemorySeqId seq, std::span<const Token> history);

  const Model& draft_;
  int64_t target_vocab_;
  Context ctx_;
  std::vector<std::vector<Token>> held_;  // per sequence: the tokens the draft memory holds
  double ms_per_draft_ = 0.0;
};

}  // namespace agentkv
