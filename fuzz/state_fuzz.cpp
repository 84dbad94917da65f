// libFuzzer target for the state-file reader (docs/state-format.md) and the KV code file reader
// (memory/kv_code.h, what --kv-code reads: refused with agentkv::Error or read back to the same
// bytes): what a restore or adopt reads
// from a file or a request; and for the page tiers' records (memory/page_record.h,
// memory/snapshot_record.h: what a Redis or disk tier hands back), decoded for a dense and a hybrid
// memory and, when accepted, written into it. Any input is decoded or refused with agentkv::Error; a decoded state is
// then planned against, and restored into, a small hybrid memory (KV + recurrent) of the layout it
// claims, or refused there with agentkv::Error; re-encoding a decoded state must decode again.
// Anything else (a crash, a sanitizer report, another exception) is a finding.
//
// AGENTKV_FUZZ_WRITE_SEEDS=DIR: writes valid states (dense and hybrid, with tokens, logits and
// checkpoints) to DIR at start-up, as seeds.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "agentkv/error.h"
#include "memory/kv_code.h"
#include "memory/kv_code_fit.h"
#include "memory/memory_state.h"
#include "memory/page_record.h"
#include "memory/sequence_memory.h"
#include "memory/snapshot_record.h"

using namespace agentkv;
using namespace agentkv::memory;

namespace {

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) std::abort(); \
  } while (0)

// Layers 0 and 2 attention, 1 and 3 recurrent; 4 sequences over 64 cells.
std::unique_ptr<SequenceMemory> make_memory(bool hybrid, GgmlType type) {
  KvLayout kv;
  kv.layer_has_kv = hybrid ? std::vector<bool>{true, false, true, false} : std::vector<bool>{true, true};
  kv.n_embd_k = 64;
  kv.n_embd_v = 64;
  kv.type_k = type;
  kv.type_v = type;
  kv.n_cells = 64;
  kv.n_seq_max = 4;
  std::unique_ptr<RecurrentMemory> rec;
  if (hybrid) {
    RecurrentLayout rl;
    rl.layer_recurrent = {false, true, false, true};
    rl.n_conv = 12;
    rl.n_ssm = 16;
    rl.n_seq_max = 4;
    rec = std::make_unique<RecurrentMemory>(rl);
  }
  return std::make_unique<SequenceMemory>(std::make_unique<KvCache>(kv), std::move(rec));
}

void fill(SequenceMemory& mem, SeqId seq, int n) {
  UBatch ub;
  for (int i = 0; i < n; ++i) ub.add(i, {seq});
  auto placement = mem.prepare(ub);
  FUZZ_CHECK(placement.has_value());
  mem.apply(ub, *placement);
}

void write_seeds(const std::string& dir) {
  int k = 0;
  for (bool hybrid : {false, true}) {
    for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
      auto mem = make_memory(hybrid, type);
      fill(*mem, 1, 5);
      fill(*mem, 2, 3);
      StateContents c;
      c.fingerprint = 42;
      c.memory = memory_state_view(*mem, 1, kStateAll);
      c.has_tokens = true;
      c.tokens = {1, 2, 3, 4, 5};
      c.logits = {0.5f, -1.0f, 2.0f};
      if (hybrid) c.checkpoints.push_back({2, memory_state_view(*mem, 1, kStatePartialOnly)});
      auto write = [&](const std::vector<uint8_t>& blob, const char* kind) {
        const std::string path = dir + "/" + kind + "-" + std::to_string(k++) + ".bin";
        if (FILE* f = std::fopen(path.c_str(), "wb")) {
          std::fwrite(blob.data(), 1, blob.size(), f);
          std::fclose(f);
        }
      };
      const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
      const std::vector<uint32_t> cells = {0, 1, 2, 3, 4};
      write(encode_page(*mem->kv(), 77, 0, tokens, cells), "page");
      if (hybrid) {
        const MemorySnapshot snap = MemorySnapshot::capture(*mem, 1, kStatePartialOnly);
        write(encode_snapshot_record(snapshot_record_key(77), 5, snap), "snapshot");
      }
      for (SeqId s : {SeqId{1}, SeqId{-1}}) {
        if (s < 0) c.memory = memory_state_view(*mem, -1, kStateAll);
        const std::vector<uint8_t> blob = encode_state(c);
        const std::string path = dir + "/state-" + std::to_string(k++) + ".akvs";
        if (FILE* f = std::fopen(path.c_str(), "wb")) {
          std::fwrite(blob.data(), 1, blob.size(), f);
          std::fclose(f);
        }
      }
    }
  }
}

}  // namespace

// A KV code fitted to a few made-up rows (1 layer, 1 KV head of 32: 16 KiB, under the fuzzer's
// max_len), as a seed.
void write_code_seed(const std::string& dir) {
  KvMoments m({2}, 32, 2, 1);
  std::vector<float> q(64), k(32), v(32);
  for (int t = 0; t < 50; ++t) {
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((t * 7 + i * 3) % 11) - 5.0f;
    for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>((t * 5 + i * i) % 13) - 6.0f, v[i] = static_cast<float>((t + i) % 7) - 3.0f;
    m.add(2, q.data(), k.data(), v.data());
  }
  const std::vector<uint8_t> bytes = fit_kv_code(m, 16, 32)->serialize();
  if (FILE* f = std::fopen((dir + "/code.kvcode").c_str(), "wb")) {
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("AGENTKV_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    write_code_seed(dir);
  }
  return 0;
}

namespace {
void fuzz_one(std::span<const uint8_t> blob);
void fuzz_tier_record(std::span<const uint8_t> bytes);

// A KV code file: refused, or read into a code whose bytes are the input's.
void fuzz_kv_code(const std::vector<uint8_t>& bytes) {
  std::shared_ptr<const KvCode> code;
  try {
    code = KvCode::parse(bytes, "fuzz code");
  } catch (const Error&) {
    return;
  }
  FUZZ_CHECK(code->serialize() == bytes);
}

// A length field and checksum that match at `at` (a state container's start), so that mutations
// reach the section parser (a random change fails the checksum otherwise).
std::vector<uint8_t> with_valid_frame(std::span<const uint8_t> bytes, size_t at) {
  std::vector<uint8_t> fixed(bytes.begin(), bytes.end());
  const uint64_t length = bytes.size() - at;
  std::memcpy(fixed.data() + at + 8, &length, sizeof length);
  const uint64_t sum = XXH64(fixed.data() + at, length - 8, 0);
  std::memcpy(fixed.data() + fixed.size() - 8, &sum, sizeof sum);
  return fixed;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_one({data, size});
  if (size >= 24) fuzz_one(with_valid_frame({data, size}, 0));
  fuzz_tier_record({data, size});
  std::vector<uint8_t> code(data, data + size);
  fuzz_kv_code(code);
  if (size >= 16) {  // its trailing checksum made to match, so that mutations reach the fields
    const uint64_t sum = XXH64(code.data(), size - 8, 0);
    std::memcpy(code.data() + size - 8, &sum, sizeof sum);
    fuzz_kv_code(code);
  }
  if (size >= 24 + 24) fuzz_tier_record(with_valid_frame({data, size}, 24));  // a snapshot record's container
  if (size >= 40) {  // a page record's trailing checksum made to match
    std::vector<uint8_t> fixed(data, data + size);
    const uint64_t sum = XXH64(fixed.data(), size - 8, 0);
    std::memcpy(fixed.data() + size - 8, &sum, sizeof sum);
    fuzz_tier_record(fixed);
  }
  return 0;
}

namespace {

void fuzz_one(std::span<const uint8_t> blob) {
  StateContents c;
  try {
    c = decode_state(blob, "fuzz state");
  } catch (const Error&) {
    return;  // refused cleanly
  }
  // Re-encoding what was accepted gives a state that decodes again, and is a fixed point.
  const std::vector<uint8_t> again = encode_state(c);
  StateContents c2 = decode_state(again, "re-encoded state");
  FUZZ_CHECK(c2.tokens == c.tokens && c2.logits.size() == c.logits.size() &&
             c2.checkpoints.size() == c.checkpoints.size() && c2.has_tokens == c.has_tokens);
  FUZZ_CHECK(encode_state(c2) == again);

  // Restore into memories of both kinds; refusals are agentkv::Error and leave memory as it was.
  for (bool hybrid : {false, true}) {
    for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
      auto mem = make_memory(hybrid, type);
      fill(*mem, 0, 7);
      const std::vector<uint8_t> before = encode_state(StateContents{
          .fingerprint = 0, .memory = memory_state_view(*mem, -1, kStateAll)});
      for (SeqId dest : {SeqId{-1}, SeqId{3}}) {
        try {
          for (const CheckpointImage& cp : c.checkpoints) check_memory_layout(*mem, cp.image);
          const MemoryRestorePlan plan = plan_memory_restore(*mem, c.memory, dest);
          apply_memory_restore(*mem, c.memory, plan);
          // What was restored can be saved again.
          (void)encode_state(StateContents{.fingerprint = 1, .memory = memory_state_view(*mem, dest, kStateAll)});
          break;
        } catch (const Error&) {
          const std::vector<uint8_t> now = encode_state(StateContents{
              .fingerprint = 0, .memory = memory_state_view(*mem, -1, kStateAll)});
          FUZZ_CHECK(now == before);
        }
      }
    }
  }
}

// Tier records: refused (nullopt) or decoded into rows / a snapshot that fit the memory.
void fuzz_tier_record(std::span<const uint8_t> bytes) {
  for (bool hybrid : {false, true}) {
    auto mem = make_memory(hybrid, GgmlType::F16);
    if (const auto page = decode_page(*mem->kv(), bytes)) {
      FUZZ_CHECK(page->rows.size() == page->tokens.size() * page_cell_bytes(*mem->kv()));
      if (page->tokens.size() <= mem->kv()->layout().n_cells) {
        std::vector<uint32_t> cells(page->tokens.size());
        for (size_t i = 0; i < cells.size(); ++i) cells[i] = static_cast<uint32_t>(i);
        write_page_rows(*mem->kv(), *page, cells);
      }
    }
    if (!hybrid || bytes.size() < 20) continue;
    uint64_t key;
    uint32_t pos;
    std::memcpy(&key, bytes.data() + 8, sizeof key);
    std::memcpy(&pos, bytes.data() + 16, sizeof pos);
    if (const auto snap = decode_snapshot_record(*mem, bytes, key, pos)) {
      try {
        snap->restore(*mem, 2);
      } catch (const Error&) {  // no room: refused, memory unchanged
      }
    }
  }
}

}  // namespace
