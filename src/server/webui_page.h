// The web UI: webui/index.html, embedded at build time (cmake/embed_text.cmake), served at GET /.
#pragma once
#include <string_view>

namespace agentkv::server {

std::string_view webui_page();

}  // namespace agentkv::server
