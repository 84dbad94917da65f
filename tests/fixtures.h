// ../shared/fixtures (fixture GGUF models, tokenizers, llama.cpp's reference outputs) lies beside
// the clone, not in it. A clone on its own still passes: each test that reads the fixtures starts
// with AGENTKV_NEEDS_FIXTURES() (or its suite's SetUp() does), which skips it by name with one
// reason when the folder is absent. ctest then shows it "Skipped" (gtest_discover_tests matches
// gtest's "[  SKIPPED ]"), and tests/fixtures_note.cmake counts the skips in one line at the end.
// Decided per test, not per binary, so that a file's other tests keep running without fixtures.
#pragma once
#include <gtest/gtest.h>

#include <exception>
#include <filesystem>
#include <string>

namespace agentkv::testing_support {

inline bool fixtures_present() { return std::filesystem::is_directory(AGENTKV_FIXTURES_DIR); }

// A suite's one-time set-up, run so that an exception is kept, not thrown: gtest skips every test
// of a suite whose SetUpTestSuite() throws, and ctest shows those "Skipped", hiding the failure.
// The suite's SetUp() fails each test with the error instead (AGENTKV_SUITE_SETUP_OK).
template <typename F>
void run_suite_setup(F&& setup, std::string& error) {
  try {
    setup();
  } catch (const std::exception& e) {
    error = e.what();
  }
}

}  // namespace agentkv::testing_support

// The reason a skipped test gives; tests/fixtures_note.cmake counts it.
#define AGENTKV_FIXTURES_MISSING \
  "fixtures not found at " AGENTKV_FIXTURES_DIR ": the full suite needs them beside the clone (README)"

// GTEST_SKIP() returns from the enclosing function: use it in a test body or SetUp(), not in a helper
// that the test goes on from (nor in SetUpTestSuite(), which gtest 1.12 does not skip from).
#define AGENTKV_SUITE_SETUP_OK(error) \
  do {                                \
    if (!(error).empty()) FAIL() << "the suite's set-up failed: " << (error); \
  } while (0)

#define AGENTKV_NEEDS_FIXTURES()                             \
  do {                                                       \
    if (!::agentkv::testing_support::fixtures_present())     \
      GTEST_SKIP() << AGENTKV_FIXTURES_MISSING;              \
  } while (0)
