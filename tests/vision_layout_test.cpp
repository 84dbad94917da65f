// The layout of a prompt with images (agentkv/vision.h): rope_position recomputes, from the image
// spans alone, the rope position add_text / add_image gave every token (the scheduler relies on it
// for prompt chunks and generated tokens), on random layouts; image rows carry content-keyed ids.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "agentkv/vision.h"

namespace agentkv {
namespace {

TEST(VisionLayout, RopePositionMatchesTheLayoutOnRandomPrompts) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    Batch b;
    PromptCursor cursor;
    std::vector<ImageSpan> spans;
    const int n_parts = 1 + static_cast<int>(rng() % 6);
    for (int part = 0; part < n_parts; ++part) {
      if (rng() % 2) {
        std::vector<Token> text(rng() % 5, 42);
        add_text(b, text.data(), text.size(), 0, cursor, false);
      } else {
        ImageEmbedding img;
        img.grid_x = 1 + static_cast<int64_t>(rng() % 5);
        img.grid_y = 1 + static_cast<int64_t>(rng() % 5);
        img.n_tokens = img.grid_x * img.grid_y;
        img.n_embd = 2;
        img.rows.assign(static_cast<size_t>(img.n_tokens * img.n_embd), 0.5f);
        img.content_hash = rng();
        spans.push_back({b.size(), img.grid_x, img.grid_y});
        add_image(b, img, 0, cursor);
      }
    }
    // Generated tokens continue after the prompt.
    for (int g = 0; g < 3; ++g) {
      const Token t = 7;
      add_text(b, &t, 1, 0, cursor, true);
    }
    ASSERT_EQ(b.rope.size(), b.size());
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(rope_position(spans, i), b.rope[i]) << "round " << round << " token " << i;
      EXPECT_EQ(b.pos[i], static_cast<MemoryPos>(i));  // the cache position is the index
    }
  }
}

TEST(VisionLayout, ImageRowTokensAreNegativeAndKeyedByContent) {
  for (uint64_t h : {0ull, 1ull, 0xdeadbeefull})
    for (int64_t k = 0; k < 100; ++k) {
      EXPECT_LT(image_row_token(h, k), 0);
      EXPECT_EQ(image_row_token(h, k), image_row_token(h, k));
    }
  EXPECT_NE(image_row_token(1, 0), image_row_token(2, 0));
  EXPECT_NE(image_row_token(1, 0), image_row_token(1, 1));
}

}  // namespace
}  // namespace agentkv
