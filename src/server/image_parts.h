// Images in requests: OpenAI chat `image_url` content parts (the Anthropic `image` blocks and the
// Responses `input_image` parts are converted to them), read in the order the rendered prompt will
// show them. Only data: URLs are taken: nothing is ever fetched.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "server/json_fields.h"

namespace agentkv::server {

// The text an image part stands for in a message until the prompt is tokenized (llama.cpp's
// media marker).
inline constexpr const char* kMediaMarker = "<__media__>";

// Whether `part` is an {"type": "image_url", ...} content part.
bool is_image_part(const Json& part);
// The image_url part for a data: URL (what the Anthropic and Responses converters emit).
Json image_part(const std::string& data_url);
// The file bytes of an image part: {"type": "image_url", "image_url": {"url": "data:...;base64,..."}}
// (or "image_url": "data:..."). Throws invalid_request: a remote URL (agentkv fetches nothing), a
// data URL that is not base64 or not an image, a body over max_bytes.
std::vector<uint8_t> image_part_bytes(const Json& part, const std::string& where, size_t max_bytes);
// Every image part of body.messages[].content, in order.
std::vector<std::vector<uint8_t>> collect_chat_images(const Json& body, size_t max_bytes);
// The media of a llama-server prompt object, {"prompt_string": TEXT, "multimodal_data": [...]}:
// each item base64 (llama-server's form) or a data: URL, in marker order; none for any other
// prompt. Throws invalid_request for an item that is neither, or over max_bytes.
std::vector<std::vector<uint8_t>> prompt_media(const Json& prompt, size_t max_bytes);

}  // namespace agentkv::server
