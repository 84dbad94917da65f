// The engine APIs the `agentkv` command reaches the layers below through (tools/ is sealed from
// them, docs/architecture.md): sequence snapshots, GGUF and state descriptions, page records and
// the single local page tiers. The commands' outputs are pinned by the integration tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/context.h"
#include "agentkv/gguf_info.h"
#include "agentkv/kv_page_records.h"
#include "agentkv/kv_status.h"
#include "agentkv/local_tiers.h"
#include "agentkv/seq_snapshot.h"
#include "agentkv/session_state.h"
#include "fixtures.h"

namespace agentkv {
namespace {

const std::string kFixtures = AGENTKV_FIXTURES_DIR;

std::unique_ptr<Context> context_of(const Model& model) {
  ContextParams cp;
  cp.n_ctx = 128;
  cp.n_threads = 1;
  return std::make_unique<Context>(model, cp);
}

void decode(Context& ctx, MemoryPos p0, int n) {
  Batch b;
  for (int i = 0; i < n; ++i) b.add(static_cast<Token>(5 + 11 * (p0 + i) % 300), p0 + i, {0}, i + 1 == n);
  ASSERT_EQ(ctx.decode(b), 0);
}

TEST(CommandEngineApi, SnapshotRestoresTheSequenceOfAHybridModel) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kFixtures + "/models/qwen35-micro.gguf");
  auto ctx = context_of(*model);
  ASSERT_TRUE(ctx->needs_snapshots());  // it cannot drop a suffix: only a snapshot goes back
  decode(*ctx, 0, 16);
  const SeqSnapshot at16 = SeqSnapshot::capture(*ctx, -1);
  decode(*ctx, 16, 8);
  const std::vector<float> first(ctx->last_logits(), ctx->last_logits() + model->n_vocab());
  at16.restore(*ctx, -1);
  EXPECT_EQ(ctx->memory().seq_pos_max(0), 15);
  decode(*ctx, 16, 8);
  const std::vector<float> again(ctx->last_logits(), ctx->last_logits() + model->n_vocab());
  EXPECT_EQ(first, again);
}

TEST(CommandEngineApi, DescriptionsOfAGgufAndAStateBlob) {
  AGENTKV_NEEDS_FIXTURES();
  const std::string path = kFixtures + "/models/qwen3-micro.gguf";
  const std::string info = describe_gguf(path, false);
  EXPECT_EQ(info.rfind("file:      " + path, 0), 0u);
  EXPECT_NE(info.find("\ntotal: "), std::string::npos);
  EXPECT_THROW(describe_gguf("/proc/self/status", false), Error);

  auto model = Model::load(path);
  auto ctx = context_of(*model);
  decode(*ctx, 0, 8);
  const std::vector<uint8_t> blob = save_seq(*ctx, 0);
  const StateSummary d = summarize_state(blob, "state");
  EXPECT_EQ(d.fingerprint, model_fingerprint(*model));
  EXPECT_NE(d.description.find("contents: sequence 0"), std::string::npos);
  EXPECT_THROW(summarize_state(std::vector<uint8_t>(blob.begin(), blob.end() - 1), "state"), Error);
}

TEST(CommandEngineApi, PageRecordsGoThroughTheLocalTiersAndBack) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kFixtures + "/models/qwen3-micro.gguf");
  auto ctx = context_of(*model);
  decode(*ctx, 0, 32);
  EXPECT_FALSE(kv_status(*ctx).windowed);
  const std::vector<uint32_t> cells = kv_cells_of_positions(*ctx, 32);
  std::vector<int32_t> tokens(16, 7);
  const std::vector<uint8_t> record = encode_kv_page(*ctx, 42, 0, tokens, std::span(cells).first(16));
  const std::string dir = (std::filesystem::temp_directory_path() / ("agentkv-tier-api-" + std::to_string(::getpid()))).string();
  {
    const std::unique_ptr<WarmTier> warm = make_warm_tier(*ctx, std::nullopt, 1 << 20, 1 << 20);
    const std::unique_ptr<DiskTier> disk = make_disk_tier(dir, 1 << 20, 1 << 20);
    for (PageTier* t : {static_cast<PageTier*>(warm.get()), static_cast<PageTier*>(disk.get())}) t->put(42, record);
    warm->flush();
    disk->flush();
    EXPECT_EQ(warm->stats().pages, 1u);
    EXPECT_EQ(disk->stats().pages_on_disk, 1u);
    const uint64_t hash = 42;
    for (PageTier* t : {static_cast<PageTier*>(warm.get()), static_cast<PageTier*>(disk.get())}) {
      const auto got = t->get(std::span(&hash, 1));
      ASSERT_TRUE(got[0]);
      EXPECT_EQ(*got[0], record);
      EXPECT_TRUE(write_kv_page(*ctx, *got[0], std::span(cells).first(16)));
    }
    EXPECT_NE(make_warm_tier(*ctx, GgmlType::Q8_0, 1 << 20, 1 << 20)->codec_name(), warm->codec_name());
  }
  std::filesystem::remove_all(dir);
  std::vector<uint8_t> broken = record;
  broken.resize(broken.size() / 2);
  EXPECT_FALSE(write_kv_page(*ctx, broken, std::span(cells).first(16)));
}

}  // namespace
}  // namespace agentkv
