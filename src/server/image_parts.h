// Images in requests: OpenAI chat `image_url` content parts (the Anthropic `image` blocks and the
// Responses `input_image` parts are converted to them), read in the order the rendered prompt will
// show them. data: URLs, and file:// URLs under the server's --media-path (llama-server's): nothing
// is ever fetched from the network.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "agentkv/vision.h"
#include "server/json_fields.h"

namespace agentkv::server {

// The text an image part stands for in a message until the prompt is tokenized.
using agentkv::kMediaMarker;

// Whether `part` is an {"type": "image_url", ...} content part.
bool is_image_part(const Json& part);
// The image_url part for a data: URL (what the Anthropic and Responses converters emit).
Json image_part(const std::string& data_url);
// Where a request's images may come from.
struct MediaSource {
  size_t max_bytes = 16u << 20;  // one image's file at most
  // --media-path: file://RELATIVE/PATH names a file under this folder (none beyond it, symbolic
  // links included); empty: file:// URLs are refused.
  std::string media_path;
};

// The file bytes of an image part: {"type": "image_url", "image_url": {"url": "data:...;base64,..."}}
// (or "image_url": "data:..."), or file://PATH under source.media_path. Throws invalid_request: a
// remote URL (agentkv fetches nothing), a data URL that is not base64 or not an image, a file://
// URL without --media-path or outside it or unreadable, a file over max_bytes.
std::vector<uint8_t> image_part_bytes(const Json& part, const std::string& where, const MediaSource& source);
// The bytes of a file:// URL under source.media_path (the same refusals).
std::vector<uint8_t> media_file_bytes(const std::string& url, const std::string& where, const MediaSource& source);
// Every image part of body.messages[].content, in order.
std::vector<std::vector<uint8_t>> collect_chat_images(const Json& body, const MediaSource& source);
// The media of a llama-server prompt object, {"prompt_string": TEXT, "multimodal_data": [...]}:
// each item base64 (llama-server's form), a data: URL or a file:// URL under --media-path, in
// marker order; none for any other prompt. Throws invalid_request for an item that is none of
// them, or over max_bytes.
std::vector<std::vector<uint8_t>> prompt_media(const Json& prompt, const MediaSource& source);

}  // namespace agentkv::server
