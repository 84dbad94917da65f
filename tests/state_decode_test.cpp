// State save/restore with real models (the fixture GGUFs): decoding the same tokens three ways —
// fresh; after save -> clear -> restore; after a restore into another sequence of a fragmented
// cache — gives bit-identical logits for every KV cache type, dense and hybrid. A restored
// sequence samples its next token from the saved logits and recomputes no prompt token. Blobs
// from another model or KV type are refused with memory unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "engine/context_impl.h"
#include "memory/memory_state.h"
#include "agentkv/session_state.h"
#include "model/model.h"
#include "fixture_models.h"

namespace agentkv {
namespace {

using memory::SeqId;

constexpr int kContinue = 4;

const Model& model(const std::string& name) { return testing_support::fixture_model(name); }

std::vector<Token> prompt_tokens(const Model& m) {
  return m.tokenizer().encode("The state of a sequence is saved, cleared and restored.");
}

std::vector<float> last_logits(const Context& ctx) {
  return std::vector<float>(ctx.last_logits(), ctx.last_logits() + ctx.model().n_vocab());
}

Token argmax(const std::vector<float>& v) {
  return static_cast<Token>(std::max_element(v.begin(), v.end()) - v.begin());
}

void decode_run(Context& ctx, const std::vector<Token>& tokens, memory::Pos p0, SeqId seq) {
  Batch b;
  b.add_sequence(tokens.data(), tokens.size(), p0, seq, true);
  ASSERT_EQ(ctx.decode(b), 0);
}

// Greedy continuation of seq from `logits` (the last prompt token's): the logits of each step.
std::vector<std::vector<float>> continue_greedy(Context& ctx, SeqId seq, std::vector<float> logits) {
  std::vector<std::vector<float>> out;
  memory::Pos pos = ctx.memory().seq_pos_max(seq) + 1;
  for (int i = 0; i < kContinue; ++i) {
    const Token t = argmax(logits);
    decode_run(ctx, {t}, pos++, seq);
    logits = last_logits(ctx);
    out.push_back(logits);
  }
  return out;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_bit_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bit_equal(a[i], b[i])) << what << ": step " << i;
}

// Cells of seq in its stream (to check that a restore really landed in a fragmented layout).
std::vector<uint32_t> kv_cells(const Context& ctx, SeqId seq) {
  const auto& kv = *sequence_memory(ctx).kv();
  const auto& c = kv.cells(kv.layout().stream_of(seq));
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < c.size(); ++i)
    if (!c.is_empty(i) && c.has_seq(i, seq)) out.push_back(i);
  return out;
}

// Everything a refused load must leave alone: cell tables, used rows, recurrent states.
std::vector<uint8_t> memory_bytes(const Context& ctx) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  const auto& mem = sequence_memory(ctx);
  if (const auto* kv = mem.kv())
    for (uint32_t s = 0; s < kv->layout().n_streams(); ++s) {
      const auto& c = kv->cells(s);
      put(c.pos_data(), c.size() * sizeof(memory::Pos));
      put(c.seq_data(), c.size() * sizeof(memory::SeqSet));
      for (int il = 0; il < ctx.model().config().n_layer; ++il)
        if (kv->rows().layer_has_kv(il)) {
          put(kv->rows().k_data(il, s), c.size() * kv->rows().row_bytes_k());
          put(kv->rows().v_data(il, s), c.size() * kv->rows().row_bytes_v());
        }
    }
  if (const auto* rec = mem.rec())
    for (uint32_t c = 0; c < rec->n_cells(); ++c) {
      const memory::Pos p = rec->cell_pos(c);
      put(&p, sizeof p);
      for (int il = 0; il < ctx.model().config().n_layer; ++il)
        if (ctx.model().config().is_recurrent(il)) {
          put(rec->conv_state(il, c), rec->layout().n_conv * sizeof(float));
          put(rec->ssm_state(il, c), rec->layout().n_ssm * sizeof(float));
        }
    }
  return out;
}

ContextParams params(GgmlType type, bool unified = true) {
  ContextParams cp;
  cp.n_ctx = 96;
  cp.n_seq_max = 4;
  cp.kv.unified = unified;
  cp.n_threads = 2;
  cp.kv.type_k = type;
  cp.kv.type_v = type;
  return cp;
}

// The three ways, in one context.
void check_three_ways(const std::string& name, const ContextParams& cp) {
  const Model& m = model(name);
  const bool hybrid = m.config().is_hybrid();
  const std::vector<Token> prompt = prompt_tokens(m);
  Context ctx(m, cp);

  // 1. Fresh: prompt, save, continue.
  decode_run(ctx, prompt, 0, 0);
  const std::vector<float> prompt_logits = last_logits(ctx);
  SaveOptions opt;
  opt.with_tokens = true;
  opt.tokens = prompt;
  opt.logits = prompt_logits;
  const std::vector<uint8_t> blob = save_seq(ctx, 0, opt);
  const auto fresh = continue_greedy(ctx, 0, prompt_logits);

  // 2. Clear, restore into the same sequence: no prompt token is evaluated again.
  ctx.memory().clear();
  ctx.reset_stats();
  const LoadedState loaded = load_seq(ctx, blob, 0);
  EXPECT_EQ(ctx.stats().n_tokens, 0);
  EXPECT_EQ(loaded.tokens, prompt);
  EXPECT_TRUE(bit_equal(loaded.logits, prompt_logits));
  EXPECT_EQ(ctx.memory().seq_pos_max(0), static_cast<memory::Pos>(prompt.size()) - 1);
  expect_bit_equal(continue_greedy(ctx, 0, loaded.logits), fresh, name + " restored");
  EXPECT_EQ(ctx.stats().n_tokens, kContinue);

  // 3. Another sequence of a fragmented cache: sequences 1 and 2 interleave, then 2 goes, leaving
  // holes among 1's cells (the restored cells are scattered over them).
  ctx.memory().clear();
  const std::vector<Token> filler(prompt.begin(), prompt.begin() + 5);
  decode_run(ctx, filler, 0, 1);
  decode_run(ctx, filler, 0, 2);
  decode_run(ctx, filler, 5, 1);
  decode_run(ctx, {filler[0], filler[1], filler[2]}, 5, 2);
  ASSERT_TRUE(ctx.memory().seq_rm(2, -1, -1));
  ctx.reset_stats();
  const LoadedState into3 = load_seq(ctx, blob, 3);
  EXPECT_EQ(ctx.stats().n_tokens, 0);
  if (cp.kv.unified) {
    const auto cells = kv_cells(ctx, 3);
    ASSERT_EQ(cells.size(), prompt.size());
    EXPECT_NE(cells.back() - cells.front() + 1, cells.size()) << "restore was not fragmented";
  }
  expect_bit_equal(continue_greedy(ctx, 3, into3.logits), fresh, name + " restored into seq 3");
  EXPECT_EQ(ctx.stats().n_tokens, kContinue);
  if (hybrid) {
    EXPECT_EQ(sequence_memory(ctx).rec()->seq_pos_max(1), 9);  // seq 1 untouched
  }
  // What /metrics reports as held memory, counted from the cell tables, is what a state of the
  // whole memory holds (every KV type, one stream or one per sequence, hybrid).
  EXPECT_EQ(ctx.memory_bytes(), memory::memory_state_view(sequence_memory(ctx), -1, memory::kStateAll).row_bytes());
}

class DenseAllTypes : public ::testing::TestWithParam<GgmlType> {
 protected:
  void SetUp() override { AGENTKV_NEEDS_FIXTURES(); }
};

TEST_P(DenseAllTypes, ThreeWaysGiveIdenticalLogits) { check_three_ways("qwen3-micro", params(GetParam())); }

INSTANTIATE_TEST_SUITE_P(KvTypes, DenseAllTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                           GgmlType::IQ4_NL),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

TEST(StateDecode, DensePerSequenceStreams) {
  AGENTKV_NEEDS_FIXTURES();
  check_three_ways("qwen3-micro", params(GgmlType::F16, false));
}

TEST(StateDecode, HybridMoeThreeWays) {
  AGENTKV_NEEDS_FIXTURES();
  check_three_ways("qwen35moe-micro", params(GgmlType::F16));
}
TEST(StateDecode, HybridMoeQuantizedKv) {
  AGENTKV_NEEDS_FIXTURES();
  check_three_ways("qwen35moe-micro", params(GgmlType::Q8_0));
}
TEST(StateDecode, HybridDenseThreeWays) {
  AGENTKV_NEEDS_FIXTURES();
  check_three_ways("qwen35-micro", params(GgmlType::BF16));
}

// The checkpoint pattern: a partial save (recurrent part only) at the end of the prompt, more
// tokens, then back to the prompt's end: restore the state, drop the later attention cells.
TEST(StateDecode, HybridPartialRestoreRollsBack) {
  AGENTKV_NEEDS_FIXTURES();
  const Model& m = model("qwen35moe-micro");
  const std::vector<Token> prompt = prompt_tokens(m);
  Context ctx(m, params(GgmlType::F16));
  decode_run(ctx, prompt, 0, 0);
  const std::vector<float> prompt_logits = last_logits(ctx);
  SaveOptions opt;
  opt.flags = kSavePartialOnly;
  opt.logits = prompt_logits;
  const std::vector<uint8_t> blob = save_seq(ctx, 0, opt);
  const auto fresh = continue_greedy(ctx, 0, prompt_logits);

  ctx.reset_stats();
  const LoadedState loaded = load_seq(ctx, blob, 0);
  const memory::Pos last = static_cast<memory::Pos>(prompt.size()) - 1;
  EXPECT_EQ(sequence_memory(ctx).rec()->seq_pos_max(0), last);
  EXPECT_EQ(sequence_memory(ctx).kv()->seq_pos_max(0), last + kContinue);  // attention cells kept
  ASSERT_TRUE(ctx.memory().seq_rm(0, last + 1, -1));
  expect_bit_equal(continue_greedy(ctx, 0, loaded.logits), fresh, "partial restore");
  EXPECT_EQ(ctx.stats().n_tokens, kContinue);
}

TEST(StateDecode, WholeMemoryThroughAFile) {
  AGENTKV_NEEDS_FIXTURES();
  const Model& m = model("qwen35-micro");
  const std::vector<Token> prompt = prompt_tokens(m);
  Context ctx(m, params(GgmlType::Q4_0));
  decode_run(ctx, prompt, 0, 0);
  decode_run(ctx, {prompt[0], prompt[1]}, 0, 2);
  const std::vector<float> seq2_logits = last_logits(ctx);  // the last decode was sequence 2's
  SaveOptions opt;
  opt.logits = seq2_logits;
  const std::string path = ::testing::TempDir() + "/agentkv_state_decode_test.akv";
  write_state_file(path, save_all(ctx, opt));

  Context other(m, params(GgmlType::Q4_0));
  decode_run(other, prompt, 0, 1);
  const LoadedState loaded = load_all(other, read_state_file(path));
  std::remove(path.c_str());
  EXPECT_EQ(loaded.saved_seq, -1);
  EXPECT_FALSE(loaded.has_tokens);
  EXPECT_EQ(other.memory().seq_pos_max(1), -1);  // replaced by the whole memory
  EXPECT_EQ(other.memory().seq_pos_max(0), static_cast<memory::Pos>(prompt.size()) - 1);
  EXPECT_EQ(other.memory().seq_pos_max(2), 1);
  expect_bit_equal(continue_greedy(other, 2, loaded.logits), continue_greedy(ctx, 2, seq2_logits),
                   "whole restore, sequence 2");
  ASSERT_EQ(ctx.decode([&] {
              Batch b;
              b.add(prompt[0], static_cast<memory::Pos>(prompt.size()), {0}, true);
              return b;
            }()), 0);
  const std::vector<float> a = last_logits(ctx);
  Batch b;
  b.add(prompt[0], static_cast<memory::Pos>(prompt.size()), {0}, true);
  ASSERT_EQ(other.decode(b), 0);
  EXPECT_TRUE(bit_equal(last_logits(other), a)) << "whole restore, sequence 0";
}

TEST(StateDecode, ForeignBlobsAreRefusedWithMemoryUnchanged) {
  AGENTKV_NEEDS_FIXTURES();
  const Model& dense = model("qwen3-micro");
  const std::vector<Token> prompt = prompt_tokens(dense);
  Context f16(dense, params(GgmlType::F16));
  decode_run(f16, prompt, 0, 0);
  const std::vector<uint8_t> blob = save_seq(f16, 0);

  Context q8(dense, params(GgmlType::Q8_0));
  decode_run(q8, prompt, 0, 1);
  const auto q8_before = memory_bytes(q8);
  try {
    load_seq(q8, blob, 0);
    ADD_FAILURE() << "f16 state loaded into a q8_0 cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV types"), std::string::npos) << e.what();
  }
  EXPECT_EQ(memory_bytes(q8), q8_before);

  const Model& hybrid = model("qwen35moe-micro");
  Context h(hybrid, params(GgmlType::F16));
  decode_run(h, prompt_tokens(hybrid), 0, 0);
  const auto h_before = memory_bytes(h);
  for (const auto& foreign : {blob, save_seq(Context(model("qwen35-micro"), params(GgmlType::F16)), 0)}) {
    try {
      load_seq(h, foreign, 1);
      ADD_FAILURE() << "another model's state was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
    }
    EXPECT_EQ(memory_bytes(h), h_before);
  }
  EXPECT_NE(model_fingerprint(hybrid), model_fingerprint(model("qwen35moe-micro-q8_0")));
  EXPECT_EQ(model_fingerprint(hybrid), model_fingerprint(hybrid));

  // Logits of the wrong size and a truncated file.
  SaveOptions bad;
  const std::vector<float> few(10, 0.f);
  bad.logits = few;
  EXPECT_THROW(save_seq(f16, 0, bad), Error);
  const std::vector<uint8_t> cut(blob.begin(), blob.begin() + static_cast<long>(blob.size() / 3));
  EXPECT_THROW(load_seq(q8, cut, 0), Error);
  EXPECT_EQ(memory_bytes(q8), q8_before);
}

}  // namespace
}  // namespace agentkv
