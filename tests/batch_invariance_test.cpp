// With batch-invariant numerics (agentkv/numerics.h) reuse does not change results: a prompt
// whose first tokens came from a cache (evaluated earlier, in another batch, into other cells)
// gives the same bits as the prompt evaluated in one go, for every weight and KV type. Checked on
// the fixture models, dense and hybrid, by splitting the same prompt at many points, with another
// sequence's cells interleaved. Without it (llama.cpp's numerics, the default) only the layout
// part holds: the same batches in other cells give the same bits.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/context.h"
#include "agentkv/numerics.h"
#include "model/model.h"
#include "fixture_models.h"

namespace agentkv {
namespace {

const Model& model(const std::string& name) { return testing_support::fixture_model(name); }

std::vector<float> decode_last(Context& ctx, const std::vector<Token>& t, size_t from, size_t to, memory::SeqId seq) {
  Batch b;
  b.add_sequence(t.data() + from, to - from, static_cast<memory::Pos>(from), seq, true);
  EXPECT_EQ(ctx.decode(b), 0);
  return std::vector<float>(ctx.last_logits(), ctx.last_logits() + ctx.model().n_vocab());
}

size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return a.size();
}

// Evaluates the prompt in one go, then split at each point in a context where another sequence
// took cells first and interleaves with it; the last logits must be bit-identical.
void check_splits(const std::string& name, size_t n_prompt, std::vector<size_t> splits,
                  GgmlType kv_type = GgmlType::F16) {
  const Model& m = model(name);
  std::vector<Token> prompt;
  for (size_t i = 0; i < n_prompt; ++i) prompt.push_back(static_cast<Token>((i * 7919 + 13) % 1000 + 100));
  ContextParams cp;
  cp.n_ctx = 1024;
  cp.n_seq_max = 3;
  cp.n_threads = 2;
  cp.kv.type_k = cp.kv.type_v = kv_type;
  Context whole_ctx(m, cp);
  const std::vector<float> whole = decode_last(whole_ctx, prompt, 0, prompt.size(), 0);
  for (size_t split : splits) {
    Context ctx(m, cp);
    decode_last(ctx, prompt, 0, 7, 1);
    decode_last(ctx, prompt, 0, split, 0);
    decode_last(ctx, prompt, 7, 20, 1);
    const std::vector<float> got = decode_last(ctx, prompt, split, prompt.size(), 0);
    const size_t d = first_difference(got, whole);
    EXPECT_EQ(d, got.size()) << name << " (" << ggml_type_name(kv_type) << " KV): prompt of " << n_prompt
                             << " split at " << split << ": logit " << d << " is " << (d < got.size() ? got[d] : 0.f)
                             << ", in one go " << (d < got.size() ? whole[d] : 0.f);
  }
}

class BatchInvariance : public ::testing::Test {
 protected:
  void SetUp() override {
    AGENTKV_NEEDS_FIXTURES();
    set_batch_invariant(true);
  }
  void TearDown() override { set_batch_invariant(false); }
};

const std::vector<size_t> kShortSplits = {1, 2, 5, 17, 29};
const std::vector<size_t> kLongSplits = {1, 63, 64, 100, 191, 199};

TEST_F(BatchInvariance, DenseF16) {
  check_splits("qwen3-micro", 30, kShortSplits);
  check_splits("qwen3-micro", 200, kLongSplits);
}
TEST_F(BatchInvariance, DenseQ8_0) { check_splits("qwen3-micro-q8_0", 200, kLongSplits); }
TEST_F(BatchInvariance, DenseQ4_K_M) { check_splits("qwen3-tiny-q4_k_m", 70, {1, 3, 6, 33, 69}); }
TEST_F(BatchInvariance, DenseQuantizedKv) { check_splits("qwen3-micro", 200, kLongSplits, GgmlType::Q8_0); }
// Decoding over >= 512 keys is no longer split across threads (the split's merge rounds).
TEST_F(BatchInvariance, DenseLongContextDecode) {
  check_splits("qwen3-micro", 600, {599});
  check_splits("qwen3-micro", 600, {599}, GgmlType::Q8_0);
}
TEST_F(BatchInvariance, HybridMoe) { check_splits("qwen35moe-micro", 100, {1, 5, 64, 99}); }
TEST_F(BatchInvariance, HybridDense) { check_splits("qwen35-micro", 100, {1, 5, 64, 99}); }
// Micro-batches of 512+ tokens take the chunked delta-rule form by default, whose rounding follows
// the chunks' places in the batch: the recurrent layers must not depend on where a prompt splits.
TEST_F(BatchInvariance, HybridLongBatches) { check_splits("qwen35moe-micro", 700, {1, 100, 513, 600}); }

// The default numerics keep the layout part: the same batches in scattered cells, same bits.
TEST(LayoutInvariance, ScatteredCellsSameBatches) {
  AGENTKV_NEEDS_FIXTURES();
  const Model& m = model("qwen3-micro");
  std::vector<Token> prompt;
  for (size_t i = 0; i < 200; ++i) prompt.push_back(static_cast<Token>((i * 7919 + 13) % 1000 + 100));
  ContextParams cp;
  cp.n_ctx = 1024;
  cp.n_seq_max = 3;
  cp.n_threads = 2;
  Context plain(m, cp);
  decode_last(plain, prompt, 0, 120, 0);
  const std::vector<float> want = decode_last(plain, prompt, 120, 200, 0);
  Context scattered(m, cp);
  decode_last(scattered, prompt, 0, 50, 1);
  decode_last(scattered, prompt, 0, 120, 0);
  ASSERT_TRUE(scattered.memory().seq_rm(1, 10, 40));  // holes below seq 0's next cells
  const std::vector<float> got = decode_last(scattered, prompt, 120, 200, 0);
  EXPECT_EQ(first_difference(got, want), got.size());
}

}  // namespace
}  // namespace agentkv
