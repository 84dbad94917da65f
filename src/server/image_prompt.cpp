#include "server/image_prompt.h"

#include "agentkv/error.h"
#include "server/image_parts.h"
#include "server/server_error.h"

namespace agentkv::server {

std::vector<Token> tokenize_with_images(const Tokenizer& tok, const std::string& text, const VisionEncoder& vision,
                                        const std::vector<std::vector<uint8_t>>& files, PromptImages* images,
                                        const PieceAligner& align) {
  const std::string marker(kMediaMarker);
  const std::vector<std::string> pieces = text_pieces_around_images(text);
  const size_t n_markers = pieces.size() - 1;
  if (n_markers != files.size())
    throw invalid_request("the prompt shows " + std::to_string(n_markers) + " image places (" + marker + ") for " +
                          std::to_string(files.size()) + " images: is '" + marker + "' in the text?");
  images->images.clear();
  images->spans.clear();
  images->encoder = &vision;
  for (size_t k = 0; k < files.size(); ++k) {
    try {
      images->images.push_back(vision.prepare(files[k].data(), files[k].size()));
    } catch (const Error& e) {
      throw invalid_request("image " + std::to_string(k) + ": " + e.what());
    }
  }
  std::vector<Token> tokens;
  for (size_t k = 0; k < pieces.size(); ++k) {
    std::vector<Token> ids = tok.encode(pieces[k], /*add_special=*/k == 0, /*parse_special=*/true);
    if (align) ids = align(pieces[k], ids, tokens);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    if (k == files.size()) break;
    const ImageEmbedding& image = images->images[k];
    images->spans.push_back({tokens.size(), image.grid_x, image.grid_y});
    for (int64_t r = 0; r < image.n_tokens; ++r) tokens.push_back(image_row_token(image.content_hash, r));
  }
  return tokens;
}

HttpError no_projector_error() {
  return invalid_request("this request has images, but the server has no vision projector: start it with --mmproj "
                         "(the model's mmproj GGUF)");
}

const float* PromptImages::row(size_t k, int64_t r) const {
  ImageEmbedding& image = images.at(k);
  if (!image.projected() && encoder) encoder->project(image);
  return image.rows.data() + r * image.n_embd;
}

}  // namespace agentkv::server
