// One-line log messages of the server on stderr ("HH:MM:SS.mmm <message>"), whole lines even
// when several threads log at once.
#pragma once

namespace agentkv::server {

void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace agentkv::server
