// The warm page tier (memory/warm_page_tier.h): its codec gives back every byte, refuses what is not
// its encoding, and shrinks f16 K/V-like data; the tier agrees with a simple reference (a map of
// what was put, bounded by dropping the least recently used) over random puts, gets and forgets.
#include "memory/warm_page_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <list>
#include <map>
#include <random>

#include "agentkv/fp16.h"

namespace agentkv::memory {
namespace {

// A record of K/V-like f16 values (a header's worth of bytes first): what the tier holds in practice.
std::vector<uint8_t> f16_record(uint64_t seed, size_t n_values) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> value(0.0f, 1.5f);
  std::vector<uint8_t> r(40);
  for (auto& b : r) b = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < n_values; ++i) {
    const uint16_t h = fp32_to_fp16(value(rng));
    r.push_back(static_cast<uint8_t>(h));
    r.push_back(static_cast<uint8_t>(h >> 8));
  }
  if (seed & 1) r.push_back(0x7f);  // odd sizes too
  return r;
}

TEST(WarmPageTier, TheCodecGivesBackEveryByteAndRefusesOtherBytes) {
  for (size_t n : {0, 1, 2, 3, 1000, 4097}) {
    std::vector<uint8_t> raw(n);
    std::mt19937 rng(static_cast<unsigned>(n));
    for (auto& b : raw) b = static_cast<uint8_t>(rng());
    const std::vector<uint8_t> enc = make_exact_warm_codec()->encode(raw);
    const auto dec = make_exact_warm_codec()->decode(enc);
    ASSERT_TRUE(dec) << n;
    EXPECT_EQ(*dec, raw) << n;
    // Damaged encodings are refused, never returned as a record of other bytes.
    std::vector<uint8_t> cut(enc.begin(), enc.end() - 1);
    EXPECT_FALSE(make_exact_warm_codec()->decode(cut)) << n;
    std::vector<uint8_t> foreign = enc;
    foreign[0] ^= 1;
    EXPECT_FALSE(make_exact_warm_codec()->decode(foreign)) << n;
  }
  EXPECT_FALSE(make_exact_warm_codec()->decode({}));
}

TEST(WarmPageTier, F16ValuesCompress) {
  const std::vector<uint8_t> raw = f16_record(2, 64 * 1024);
  const std::vector<uint8_t> enc = make_exact_warm_codec()->encode(raw);
  EXPECT_EQ(*make_exact_warm_codec()->decode(enc), raw);
  // Gaussian f16 (sigma 1.5): the high byte holds ~6 bits of entropy of its 8 (sign, a narrow
  // exponent, 2 mantissa bits), the low byte is noise: ~0.88 at best; zstd -1 reaches ~0.92.
  EXPECT_LT(static_cast<double>(enc.size()), 0.95 * static_cast<double>(raw.size()));
}

TEST(WarmPageTier, RandomOperationsAgreeWithAnLruReference) {
  WarmTierConfig cfg;
  cfg.max_bytes = 40 * 1000;  // ~40 encoded records of ~1,000 bytes
  WarmPageTier tier(cfg);
  std::map<uint64_t, std::vector<uint8_t>> model;  // hash -> record
  std::map<uint64_t, uint64_t> encoded_size;
  std::list<uint64_t> lru;  // front: least recently used
  uint64_t model_bytes = 0;
  auto drop = [&](uint64_t h) {
    model_bytes -= encoded_size[h];
    model.erase(h);
    lru.remove(h);
  };
  std::mt19937 rng(11);
  for (int op = 0; op < 3000; ++op) {
    const uint64_t hash = rng() % 120;
    switch (rng() % 9) {
      case 0: case 1: case 2: case 3: {  // put, stored before the next step (stores are in order)
        std::vector<uint8_t> record = f16_record(hash * 1000 + op, 400 + rng() % 300);
        const bool fresh = !model.count(hash);
        tier.put(hash, record);
        tier.flush();
        if (fresh) {
          encoded_size[hash] = make_exact_warm_codec()->encode(record).size();
          model_bytes += encoded_size[hash];
          model[hash] = std::move(record);
          lru.push_back(hash);
          while (model_bytes > cfg.max_bytes) drop(lru.front());
        }
        break;
      }
      case 4: case 5: case 6: {  // get
        const std::vector<uint64_t> ask{hash};
        const auto got = tier.get(ask);
        ASSERT_EQ(got[0].has_value(), model.count(hash) > 0) << "op " << op << " hash " << hash;
        if (got[0]) {
          EXPECT_EQ(*got[0], model[hash]);
          lru.remove(hash);
          lru.push_back(hash);
        }
        break;
      }
      case 7: {  // the reader refused it
        tier.forget(hash);
        if (model.count(hash)) drop(hash);
        break;
      }
      default:
        EXPECT_EQ(tier.holds(hash), model.count(hash) > 0);
    }
    const WarmTierStats st = tier.stats();
    ASSERT_EQ(st.pages, model.size()) << "op " << op;
    ASSERT_EQ(st.bytes, model_bytes);
    ASSERT_LE(st.bytes, cfg.max_bytes);
    uint64_t raw = 0;
    for (const auto& [h, r] : model) raw += r.size();
    ASSERT_EQ(st.raw_bytes, raw);
  }
}

TEST(WarmPageTier, AFullQueueDropsInsteadOfBlocking) {
  WarmTierConfig cfg;
  cfg.max_queued_bytes = 10;  // nothing fits
  WarmPageTier tier(cfg);
  tier.put(1, std::vector<uint8_t>(100, 3));
  tier.flush();
  EXPECT_FALSE(tier.holds(1));
  EXPECT_EQ(tier.stats().stores_dropped, 1u);
}

}  // namespace
}  // namespace agentkv::memory

namespace agentkv::memory {
namespace {

// A record counts as held from its put on, while the background thread encodes it and after:
// holds() never goes false in between (the scheduler would send it again), and gets from another
// thread meanwhile see it or nothing, never other bytes.
TEST(WarmPageTier, ARecordIsHeldFromItsPutOnWhileOthersRead) {
  WarmTierConfig cfg;
  cfg.max_bytes = 64ull << 20;  // nothing is evicted
  WarmPageTier tier(cfg);
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::thread reader([&] {
    std::mt19937 rng(5);
    while (!done.load()) {
      const uint64_t h = rng() % 400;
      const std::vector<uint64_t> ask{h};
      const auto got = tier.get(ask);
      if (got[0] && *got[0] != f16_record(h, 300)) ++wrong;
    }
  });
  for (uint64_t h = 0; h < 400; ++h) {
    tier.put(h, f16_record(h, 300));
    for (uint64_t k = h >= 5 ? h - 5 : 0; k <= h; ++k) ASSERT_TRUE(tier.holds(k)) << k;  // the last few: mostly still queued
  }
  tier.flush();
  done = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(tier.stats().pages, 400u);
  for (uint64_t h = 0; h < 400; ++h) {
    const std::vector<uint64_t> ask{h};
    ASSERT_EQ(*tier.get(ask)[0], f16_record(h, 300)) << h;
  }
}

}  // namespace
}  // namespace agentkv::memory
