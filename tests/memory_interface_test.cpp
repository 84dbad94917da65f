// The public memory interface (include/agentkv/memory.h): the attention cache, the recurrent
// memory and the hybrid pair are driven through one MemoryInterface reference, with the same
// answers as through their own classes, and usage() counts what they hold.
#include <gtest/gtest.h>

#include <memory>

#include "agentkv/memory.h"
#include "memory/sequence_memory.h"

namespace agentkv::memory {
namespace {

KvLayout kv_layout(bool hybrid) {
  KvLayout l;
  l.layer_has_kv = hybrid ? std::vector<bool>{true, false} : std::vector<bool>{true};
  l.n_embd_k = l.n_embd_v = 32;
  l.type_k = l.type_v = GgmlType::F16;
  l.n_cells = 64;
  l.n_seq_max = 2;
  return l;
}

std::unique_ptr<SequenceMemory> make(bool hybrid) {
  std::unique_ptr<RecurrentMemory> rec;
  if (hybrid) {
    RecurrentLayout rl;
    rl.layer_recurrent = {false, true};
    rl.n_conv = 3;
    rl.n_ssm = 5;
    rl.n_seq_max = 2;
    rec = std::make_unique<RecurrentMemory>(rl);
  }
  return std::make_unique<SequenceMemory>(std::make_unique<KvCache>(kv_layout(hybrid)), std::move(rec));
}

void place(SequenceMemory& mem, SeqId seq, Pos from, int n) {
  UBatch ub;
  for (int i = 0; i < n; ++i) ub.add(from + i, {seq});
  auto p = mem.prepare(ub);
  ASSERT_TRUE(p.has_value());
  mem.apply(ub, *p);
}

TEST(MemoryInterface, AttentionThroughTheInterface) {
  auto mem = make(false);
  place(*mem, 0, 0, 10);
  MemoryInterface& m = *mem;
  MemoryInterface& kv = *mem->kv();
  EXPECT_EQ(m.seq_pos_max(0), 9);
  m.seq_cp(0, 1, 0, 5);  // shares cells: no new ones
  EXPECT_EQ(kv.seq_pos_max(1), 4);
  EXPECT_EQ(m.usage().cells_used, 10u);
  EXPECT_EQ(m.usage().cells_total, 64u);
  EXPECT_EQ(m.usage().bytes_total, mem->kv()->usage().bytes_total);
  EXPECT_TRUE(m.seq_rm(0, 5, -1));
  EXPECT_EQ(m.usage().cells_used, 5u);
  m.seq_keep(1);
  EXPECT_EQ(m.seq_pos_max(0), -1);
  m.clear();
  EXPECT_EQ(m.usage().cells_used, 0u);
}

TEST(MemoryInterface, HybridRefusesASuffixRemovalForBothParts) {
  auto mem = make(true);
  place(*mem, 0, 0, 6);
  MemoryInterface& m = *mem;
  MemoryInterface& rec = *mem->rec();
  EXPECT_EQ(rec.usage().cells_used, 1u);
  EXPECT_EQ(m.usage().cells_used, 7u);  // 6 KV cells + 1 state cell
  EXPECT_FALSE(m.seq_rm(0, 3, -1));     // the recurrent part cannot forget tokens 3..5
  EXPECT_EQ(m.seq_pos_max(0), 5);
  EXPECT_EQ(mem->kv()->seq_pos_max(0), 5);  // nothing changed in the attention part either
  EXPECT_TRUE(m.seq_rm(0, -1, -1));
  EXPECT_EQ(m.usage().cells_used, 0u);
}

}  // namespace
}  // namespace agentkv::memory
