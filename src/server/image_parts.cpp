#include "server/image_parts.h"

#include <filesystem>
#include <fstream>

#include "agentkv/error.h"
#include "server/base64.h"
#include "server/server_error.h"

namespace agentkv::server {

bool is_image_part(const Json& part) {
  if (!part.is_object()) return false;
  const auto type = part.find("type");
  return type != part.end() && type->is_string() && *type == "image_url";
}

Json image_part(const std::string& data_url) {
  return Json{{"type", "image_url"}, {"image_url", Json{{"url", data_url}}}};
}

std::vector<uint8_t> media_file_bytes(const std::string& url, const std::string& where, const MediaSource& source) {
  if (source.media_path.empty())
    throw invalid_request(where + ": file:// URLs are read only under the server's --media-path (none is set)");
  const std::string relative = url.substr(7);
  // A relative path of plain names: no absolute path, no "..", no NUL, no backslash.
  const std::filesystem::path rel(relative);
  bool plain = !relative.empty() && !rel.is_absolute() && relative.find('\0') == std::string::npos &&
               relative.find('\\') == std::string::npos;
  for (const auto& piece : rel) plain = plain && piece != ".." && piece != "." && !piece.empty();
  if (!plain) throw invalid_request(where + ": file:// paths are relative to --media-path, without '..'");
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::canonical(source.media_path, ec);
  const std::filesystem::path file = std::filesystem::canonical(root / rel, ec);
  // A symbolic link inside the folder may point outside it: the resolved path must stay inside.
  const auto inside = [&] {
    auto r = root.begin(), f = file.begin();
    for (; r != root.end(); ++r, ++f)
      if (f == file.end() || *r != *f) return false;
    return f != file.end();
  };
  if (ec || !inside() || !std::filesystem::is_regular_file(file, ec))
    throw invalid_request(where + ": no readable file '" + relative + "' under --media-path");
  const auto size = std::filesystem::file_size(file, ec);
  if (ec || size > source.max_bytes)
    throw invalid_request(where + ": the file is over " + std::to_string(source.max_bytes >> 20) + " MiB");
  std::ifstream in(file, std::ios::binary);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    throw invalid_request(where + ": '" + relative + "' could not be read");
  return bytes;
}

std::vector<uint8_t> image_part_bytes(const Json& part, const std::string& where, const MediaSource& source) {
  const size_t max_bytes = source.max_bytes;
  const auto field = part.find("image_url");
  std::string url;
  if (field != part.end() && field->is_string()) url = field->get<std::string>();
  else if (field != part.end() && field->is_object() && field->contains("url") && (*field)["url"].is_string())
    url = (*field)["url"].get<std::string>();
  else
    throw invalid_request(where + ".image_url must be {\"url\": \"data:image/...;base64,...\"}");
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0)
    throw invalid_request(where + ": remote image URLs are not fetched (agentkv reaches nothing on the network): "
                          "send the image inline as a data: URL");
  if (url.rfind("file://", 0) == 0) return media_file_bytes(url, where, source);
  if (url.rfind("data:", 0) != 0)
    throw invalid_request(where + ": the image URL must be a data: URL (or file:// under --media-path)");
  const size_t comma = url.find(',');
  if (comma == std::string::npos) throw invalid_request(where + ": malformed data: URL (no ',')");
  const std::string header = url.substr(5, comma - 5);
  if (header.size() < 7 || header.compare(header.size() - 7, 7, ";base64") != 0)
    throw invalid_request(where + ": the data: URL must be base64 (data:image/png;base64,...)");
  if (!header.empty() && header.rfind("image/", 0) != 0 && header != ";base64")
    throw invalid_request(where + ": the data: URL's type '" + header.substr(0, header.size() - 7) + "' is not an image");
  if ((url.size() - comma - 1) / 4 * 3 > max_bytes)
    throw invalid_request(where + ": the image is over " + std::to_string(max_bytes >> 20) + " MiB");
  try {
    return base64_decode(std::string_view(url).substr(comma + 1), where + "'s data: URL");
  } catch (const Error& e) {
    throw invalid_request(e.what());
  }
}

std::vector<std::vector<uint8_t>> collect_chat_images(const Json& body, const MediaSource& source) {
  std::vector<std::vector<uint8_t>> images;
  const auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array()) return images;
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& msg = (*messages)[i];
    if (!msg.is_object() || !msg.contains("content") || !msg["content"].is_array()) continue;
    const Json& parts = msg["content"];
    for (size_t k = 0; k < parts.size(); ++k)
      if (is_image_part(parts[k]))
        images.push_back(image_part_bytes(parts[k], "messages[" + std::to_string(i) + "].content[" + std::to_string(k) + "]",
                                          source));
  }
  return images;
}

std::vector<std::vector<uint8_t>> prompt_media(const Json& prompt, const MediaSource& source) {
  const size_t max_bytes = source.max_bytes;
  if (!prompt.is_object() || !prompt.contains("multimodal_data")) return {};
  const Json& data = prompt.at("multimodal_data");
  if (!data.is_array()) throw invalid_request("multimodal_data must be an array of base64 strings");
  std::vector<std::vector<uint8_t>> files;
  for (size_t i = 0; i < data.size(); ++i) {
    const std::string where = "multimodal_data[" + std::to_string(i) + "]";
    if (!data[i].is_string()) throw invalid_request(where + " must be a base64 string");
    const std::string& text = data[i].get_ref<const std::string&>();
    if (text.rfind("data:", 0) == 0 || text.rfind("file://", 0) == 0) {
      files.push_back(image_part_bytes(image_part(text), where, source));
      continue;
    }
    if (text.size() / 4 * 3 > max_bytes)
      throw invalid_request(where + ": the file is over " + std::to_string(max_bytes >> 20) + " MiB");
    try {
      files.push_back(base64_decode(text, where));
    } catch (const Error& e) {
      throw invalid_request(e.what());
    }
  }
  return files;
}

}  // namespace agentkv::server
