# Writes OUT, a C++ source defining `std::string_view NAME()` with the bytes of IN (a text file
# without the delimiter below), so the binary carries the file and nothing is read at run time.
# Usage: cmake -DIN=file -DOUT=file.cpp -DNAME=qualified::function -DHEADER=dir/header.h -P embed_text.cmake
file(READ "${IN}" content)
string(FIND "${content}" ")agentkv_embedded\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )agentkv_embedded\"")
endif()
string(REGEX REPLACE "::[^:]+$" "" ns "${NAME}")
string(REGEX REPLACE "^.*::" "" fn "${NAME}")
file(WRITE "${OUT}" "// Generated from ${IN} by cmake/embed_text.cmake: do not edit.\n#include \"${HEADER}\"\n\nnamespace ${ns} {\n\nstd::string_view ${fn}() {\n  static constexpr char kText[] = R\"agentkv_embedded(${content})agentkv_embedded\";\n  return {kText, sizeof(kText) - 1};\n}\n\n}  // namespace ${ns}\n")
