// The server's request checks (request_guard.h), the body parser's limits (json_fields.h) and the
// slot save folder (state_folder.h): issue 14's defects at the level of the pieces.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <atomic>
#include <thread>
#include <vector>

#include "memory/memory_state.h"
#include "server/json_fields.h"
#include "server/request_guard.h"
#include "server/server_error.h"
#include "server/state_folder.h"

namespace agentkv::server {
namespace {

namespace fs = std::filesystem;

template <class Fn>
HttpError error_of(Fn fn) {
  try {
    fn();
  } catch (const HttpError& e) {
    return e;
  }
  ADD_FAILURE() << "no HttpError thrown";
  return HttpError(ErrorType::Server, "none");
}

TEST(JsonDepth, CountsOutsideStringsWithoutRecursion) {
  EXPECT_EQ(json_nesting_depth("{}"), 1u);
  EXPECT_EQ(json_nesting_depth(R"({"a":[1,{"b":[]}]})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"({"a":"[[[[\"[[["})"), 1u);
  EXPECT_EQ(json_nesting_depth(R"(["\\", [[]]])"), 3u);
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  EXPECT_EQ(json_nesting_depth(deep, 256), 257u);  // stops counting past the limit
}

TEST(JsonDepth, ParseBodyRefusesDeepNestingBeforeParsing) {
  const std::string deep = R"({"messages":[{"role":"user","content":"hi","x":)" + std::string(52'000, '[') +
                           std::string(52'000, ']') + "}]}";
  const HttpError e = error_of([&] { parse_body_object(deep); });
  EXPECT_EQ(e.type(), ErrorType::InvalidRequest);
  EXPECT_NE(std::string(e.what()).find("nested too deeply"), std::string::npos);
  const std::string ok = "{\"x\":" + std::string(200, '[') + std::string(200, ']') + "}";
  EXPECT_NO_THROW(parse_body_object(ok));
}

TEST(JsonNumbers, OverflowIsAClientError) {
  for (const char* body : {R"({"temperature":1e400})", R"({"a":[-1e400]})", R"({"a":1e99999})"}) {
    const HttpError e = error_of([&] { parse_body_object(body); });
    EXPECT_EQ(http_status(e.type()), 400) << body;
  }
}

TEST(ContentLength, OnlyDigits) {
  EXPECT_EQ(parse_content_length("0"), 0u);
  EXPECT_EQ(parse_content_length("1234"), 1234u);
  EXPECT_EQ(parse_content_length(" 12 "), 12u);
  for (const char* bad : {"-5", "", "1e3", "0x10", "+5", "5 5", "12345678901234567890", "abc"})
    EXPECT_FALSE(parse_content_length(bad).has_value()) << bad;
}

TEST(ContentType, JsonOnly) {
  EXPECT_TRUE(is_json_content_type("application/json"));
  EXPECT_TRUE(is_json_content_type("Application/JSON; charset=utf-8"));
  EXPECT_TRUE(is_json_content_type("application/vnd.api+json"));
  for (const char* bad : {"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                          "application/jsonx", "text/json", "application/+json"})
    EXPECT_FALSE(is_json_content_type(bad)) << bad;
}

TEST(ApiKey, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("Bearer sesame", "Bearer sesame"));
  EXPECT_FALSE(constant_time_equal("Bearer sesam", "Bearer sesame"));
  EXPECT_FALSE(constant_time_equal("Bearer sesamee", "Bearer sesame"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal(std::string("a\0b", 3), "a"));
}

TEST(HostHeader, RebindingNamesAreRefused) {
  OriginPolicy p;
  p.bind_host = "127.0.0.1";
  EXPECT_EQ(host_of("[::1]:8080"), "::1");
  EXPECT_EQ(host_of("LocalHost:80"), "localhost");
  EXPECT_FALSE(host_of("a b").has_value());
  EXPECT_FALSE(host_of("x:80:90").has_value());
  EXPECT_FALSE(host_of("[zz]:1").has_value());
  for (const char* ok : {"localhost", "localhost:8080", "127.0.0.1:8080", "[::1]:8080", "[::1]"})
    EXPECT_TRUE(host_allowed(p, ok, true)) << ok;
  for (const char* bad : {"evil.example", "evil.example:8080", "localhost.evil.example", "10.0.0.5:8080", ""})
    EXPECT_FALSE(host_allowed(p, bad, true)) << bad;
  EXPECT_TRUE(host_allowed(p, "", false));  // no Host header at all: not a browser
  p.allowed_hosts = {"agentkv.internal"};
  EXPECT_TRUE(host_allowed(p, "AgentKV.internal:9000", true));
  p.bind_host = "0.0.0.0";  // every address of the machine is the server's
  EXPECT_TRUE(host_allowed(p, "10.0.0.5:8080", true));
  EXPECT_TRUE(host_allowed(p, "[fe80::1]:8080", true));
  EXPECT_FALSE(host_allowed(p, "evil.example", true));
  p.allowed_hosts = {"*"};
  EXPECT_TRUE(host_allowed(p, "evil.example", true));
}

TEST(OriginHeader, SameOriginOrListed) {
  OriginPolicy p;
  EXPECT_TRUE(origin_allowed(p, "http://localhost:8080", "localhost:8080"));
  EXPECT_FALSE(origin_allowed(p, "http://evil.example", "localhost:8080"));
  EXPECT_FALSE(origin_allowed(p, "null", "localhost:8080"));
  EXPECT_FALSE(origin_allowed(p, "http://localhost:8081", "localhost:8080"));
  p.cors_origins = {"http://app.example"};
  EXPECT_TRUE(origin_allowed(p, "http://APP.example", "localhost:8080"));
  EXPECT_FALSE(origin_allowed(p, "http://app.example.evil", "localhost:8080"));
  p.cors_origins = {"*"};
  EXPECT_TRUE(origin_allowed(p, "http://evil.example", "localhost:8080"));
}

class StateFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("agentkv-state-folder-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void put(const std::string& name, const std::string& bytes) { std::ofstream(dir_ / name, std::ios::binary) << bytes; }
  std::string get(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  static std::vector<uint8_t> state(const std::string& tail) {
    std::vector<uint8_t> b(4);
    const uint32_t magic = memory::kStateMagic;
    std::memcpy(b.data(), &magic, 4);
    b.insert(b.end(), tail.begin(), tail.end());
    return b;
  }
  fs::path dir_;
};

TEST_F(StateFolderTest, NamesStayInsideAndVisible) {
  for (const char* bad : {"", ".", "..", ".hidden", "a/b", "../x", "a\\b", "x.tmp"})
    EXPECT_EQ(error_of([&] { StateFolder::check_name(bad); }).type(), ErrorType::InvalidRequest) << bad;
  EXPECT_NO_THROW(StateFolder::check_name("slot0.bin"));
}

TEST_F(StateFolderTest, WritesReadsAndReplacesOnlyStates) {
  StateFolder f(dir_.string());
  f.write("a.bin", state("one"));
  EXPECT_EQ(f.read("a.bin"), state("one"));
  f.write("a.bin", state("two"));  // a state may be replaced
  EXPECT_EQ(f.read("a.bin"), state("two"));
  put("notes.txt", "the user's notes");
  const HttpError e = error_of([&] { f.write("notes.txt", state("x")); });
  EXPECT_NE(std::string(e.what()).find("not an agentkv state"), std::string::npos);
  EXPECT_EQ(get(dir_ / "notes.txt"), "the user's notes");
  put("empty", "");
  error_of([&] { f.write("empty", state("x")); });
  EXPECT_EQ((fs::status(dir_ / "a.bin").permissions() & fs::perms::others_read), fs::perms::none);
}

TEST_F(StateFolderTest, SymlinksAreNeverFollowed) {
  const fs::path outside = dir_.parent_path() / (dir_.filename().string() + "-outside");
  std::ofstream(outside) << "root:x:0:0";
  fs::create_symlink(outside, dir_ / "victim");
  StateFolder f(dir_.string());
  const HttpError w = error_of([&] { f.write("victim", state("x")); });
  EXPECT_EQ(w.type(), ErrorType::InvalidRequest);
  const HttpError r = error_of([&] { f.read("victim"); });
  EXPECT_EQ(std::string(r.what()).find("root"), std::string::npos);
  EXPECT_EQ(std::string(r.what()).find(dir_.string()), std::string::npos);
  put("foreign.bin", "root:x:0:0:whatever");
  const HttpError foreign = error_of([&] { f.read("foreign.bin"); });
  EXPECT_EQ(std::string(foreign.what()).find("root"), std::string::npos);
  EXPECT_EQ(std::string(foreign.what()).find("19"), std::string::npos);  // no size either
  EXPECT_EQ(get(outside), "root:x:0:0");
  fs::remove(outside);
}

TEST_F(StateFolderTest, ConcurrentWritesOfOneNameNeverShareATempFile) {
  StateFolder f(dir_.string());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        try {
          f.write("race.bin", state(std::string(1000 + t, static_cast<char>('a' + t))));
        } catch (const std::exception&) {
          ++failures;
        }
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"race.bin"});
  const std::vector<uint8_t> final_bytes = f.read("race.bin");
  const char c = static_cast<char>(final_bytes[4]);
  EXPECT_EQ(final_bytes, state(std::string(1000 + (c - 'a'), c)));  // one writer's whole file
}

TEST_F(StateFolderTest, StaleTemporaryFilesGoAtOpening) {
  put(".agentkv-tmp-00000000000000000000", "partial");
  put("old.bin.tmp", std::string("AKVS") + "partial");
  put("keep.tmp", "not a state");
  put("keep.bin", std::string("AKVS") + "whole");
  StateFolder f(dir_.string());
  EXPECT_EQ(f.stale_removed(), 2u);
  EXPECT_TRUE(fs::exists(dir_ / "keep.tmp"));
  EXPECT_TRUE(fs::exists(dir_ / "keep.bin"));
  EXPECT_FALSE(fs::exists(dir_ / "old.bin.tmp"));
}

}  // namespace
}  // namespace agentkv::server
