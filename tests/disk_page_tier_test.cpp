// The disk page tier (memory/disk_page_tier.h) against a simple reference: a map of what was put,
// bounded by evicting the least recently used. Random puts, gets, forgets and restarts; every get
// returns exactly the bytes put, or nothing for what was forgotten or evicted.
#include "memory/disk_page_tier.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <memory>
#include <random>

#include "agentkv/error.h"

namespace agentkv::memory {
namespace {
namespace fs = std::filesystem;

fs::path fresh_folder(const char* name) {
  const fs::path dir = fs::temp_directory_path() / ("agentkv-disk-tier-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  return dir;
}

std::vector<uint8_t> record_of(uint64_t hash, size_t size) {
  std::vector<uint8_t> r(size);
  std::mt19937_64 rng(hash);
  for (auto& b : r) b = static_cast<uint8_t>(rng());
  return r;
}

TEST(DiskPageTier, RandomOperationsAgreeWithAnLruReference) {
  const fs::path dir = fresh_folder("property");
  constexpr uint64_t kBound = 40 * 1000;  // ~40 records of ~1,000 bytes
  DiskTierConfig cfg;
  cfg.dir = dir;
  cfg.max_bytes = kBound;
  auto tier = std::make_unique<DiskPageTier>(cfg);
  std::map<uint64_t, size_t> model;  // hash -> record size
  std::list<uint64_t> lru;           // front: least recently used
  uint64_t model_bytes = 0;
  auto touch = [&](uint64_t h) {
    lru.remove(h);
    lru.push_back(h);
  };
  auto drop = [&](uint64_t h) {
    model_bytes -= model[h];
    model.erase(h);
    lru.remove(h);
  };
  std::mt19937 rng(7);
  for (int op = 0; op < 3000; ++op) {
    const uint64_t hash = rng() % 120;
    switch (rng() % 10) {
      case 0: case 1: case 2: case 3: {  // put, written before the next step (writes are in order)
        const size_t size = 800 + rng() % 400;
        tier->put(hash, record_of(hash, size));
        tier->flush();
        if (!model.count(hash)) {
          model[hash] = size;
          model_bytes += size;
          lru.push_back(hash);
          while (model_bytes > kBound) drop(lru.front());
        }
        break;
      }
      case 4: case 5: case 6: {  // get
        const std::vector<uint64_t> ask{hash};
        const auto got = tier->get(ask);
        ASSERT_EQ(got[0].has_value(), model.count(hash) > 0) << "op " << op << " hash " << hash;
        if (got[0]) {
          EXPECT_EQ(*got[0], record_of(hash, model[hash]));
          touch(hash);
        }
        break;
      }
      case 7: {  // the reader refused it
        tier->forget(hash);
        if (model.count(hash)) drop(hash);
        break;
      }
      case 8: {  // holds
        EXPECT_EQ(tier->holds(hash), model.count(hash) > 0);
        break;
      }
      default: {  // a restart: the folder is all that is left, oldest written first (uses are lost)
        tier.reset();
        tier = std::make_unique<DiskPageTier>(cfg);
        ASSERT_EQ(tier->stats().pages_found_at_start, model.size());
        std::vector<std::pair<fs::file_time_type, uint64_t>> by_age;
        for (const auto& [h, size] : model) by_age.push_back({fs::last_write_time(tier->record_path(h)), h});
        std::sort(by_age.begin(), by_age.end());
        lru.clear();
        for (const auto& a : by_age) lru.push_back(a.second);
        break;
      }
    }
    const DiskTierStats st = tier->stats();
    ASSERT_EQ(st.pages_on_disk, model.size()) << "op " << op;
    ASSERT_EQ(st.bytes_on_disk, model_bytes);
    ASSERT_LE(st.bytes_on_disk, kBound);
  }
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".page";
  EXPECT_EQ(files, model.size());
  tier.reset();
  fs::remove_all(dir);
}

TEST(DiskPageTier, LeftoversAreRemovedAndOtherFilesIgnored) {
  const fs::path dir = fresh_folder("leftovers");
  DiskTierConfig cfg;
  cfg.dir = dir;
  {
    DiskPageTier tier(cfg);
    tier.put(0xabcdef, record_of(1, 100));
    tier.flush();
  }
  std::ofstream(dir / "0000000000abcdef.123.tmp") << "half a record";
  std::ofstream(dir / "README") << "not a record";
  std::ofstream(dir / "00000000000000zz.page") << "bad name";
  DiskPageTier tier(cfg);
  EXPECT_EQ(tier.stats().leftovers_removed, 1u);
  EXPECT_EQ(tier.stats().pages_on_disk, 1u);
  EXPECT_FALSE(fs::exists(dir / "0000000000abcdef.123.tmp"));
  EXPECT_TRUE(fs::exists(dir / "README"));
  EXPECT_TRUE(tier.holds(0xabcdef));
  EXPECT_EQ(tier.record_path(0xabcdef), dir / "0000000000abcdef.page");
  // A record deleted behind the tier's back is a miss, and forgotten.
  fs::remove(dir / "0000000000abcdef.page");
  const std::vector<uint64_t> ask{0xabcdef};
  EXPECT_FALSE(tier.get(ask)[0].has_value());
  EXPECT_FALSE(tier.holds(0xabcdef));
  EXPECT_EQ(tier.stats().read_errors, 1u);
  fs::remove_all(dir);
}

TEST(DiskPageTier, AFolderThatCannotBeCreatedIsAnError) {
  const fs::path file = fresh_folder("file");
  std::ofstream(file) << "a file, not a folder";
  DiskTierConfig cfg;
  cfg.dir = file / "pages";
  EXPECT_THROW(DiskPageTier{cfg}, Error);
  fs::remove(file);
}

}  // namespace
}  // namespace agentkv::memory
