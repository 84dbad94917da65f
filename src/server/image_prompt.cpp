#include "server/image_prompt.h"

#include "agentkv/error.h"
#include "server/image_parts.h"
#include "server/server_error.h"

namespace agentkv::server {

std::vector<Token> tokenize_with_images(const Tokenizer& tok, const std::string& text, const VisionEncoder& vision,
                                        const std::vector<std::vector<uint8_t>>& files, PromptImages* images,
                                        const PieceAligner& align) {
  const std::string marker = kMediaMarker;
  size_t n_markers = 0;
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + marker.size())) ++n_markers;
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
  size_t from = 0;
  for (size_t k = 0;; ++k) {
    const size_t at = text.find(marker, from);
    std::string piece = text.substr(from, at == std::string::npos ? std::string::npos : at - from);
    if (k > 0) piece = "<|vision_end|>" + piece;
    if (at != std::string::npos) piece += "<|vision_start|>";
    std::vector<Token> ids = tok.encode(piece, /*add_special=*/k == 0, /*parse_special=*/true);
    if (align) ids = align(piece, ids, tokens);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    if (at == std::string::npos) break;
    const ImageEmbedding& image = images->images[k];
    images->spans.push_back({tokens.size(), image.grid_x, image.grid_y});
    for (int64_t r = 0; r < image.n_tokens; ++r) tokens.push_back(image_row_token(image.content_hash, r));
    from = at + marker.size();
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
