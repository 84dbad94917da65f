// A chat prompt with images: the rendered text holds kMediaMarker where each image part was
// (image_parts.h); the prompt becomes the text's tokens with each image's rows, between the
// model's vision start and end tokens, in their place (as llama.cpp's mtmd lays it out).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "agentkv/tokenizer.h"
#include "agentkv/vision.h"
#include "server/server_error.h"
#include "server/task.h"

namespace agentkv::server {

// A text piece's tokens as the memory best reuses them, given the prompt's tokens before it
// (Scheduler::align_prompt: an earlier answer keeps the tokens it was generated as).
using PieceAligner = std::function<std::vector<Token>(const std::string& text, const std::vector<Token>& plain,
                                                      std::span<const Token> before)>;

// The 400 for a request with images to a server without --mmproj.
HttpError no_projector_error();

// Prepares `files` (in marker order: decoded, preprocessed, hashed; projected later, only if the
// prompt's rows are evaluated: PromptImages::row) and lays the prompt out; *images receives the
// spans and images. Each text piece between images goes through `align` when given. Throws
// invalid_request for an image the encoder refuses or a marker count that differs from the number
// of images.
std::vector<Token> tokenize_with_images(const Tokenizer& tok, const std::string& text, const VisionEncoder& vision,
                                        const std::vector<std::vector<uint8_t>>& files, PromptImages* images,
                                        const PieceAligner& align = nullptr);

}  // namespace agentkv::server
