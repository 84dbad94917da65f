// cpp-httplib as Debian builds it. Debian's libcpp-httplib is compiled with these; the header
// must be read the same way, or httplib::Request (which holds an SSL pointer under OpenSSL
// support) changes layout. Every server file that includes httplib goes through this header.
#pragma once
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>
