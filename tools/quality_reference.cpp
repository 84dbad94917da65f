#include "tools/quality_reference.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "agentkv/error.h"

namespace agentkv::tools {
namespace {

// Fixed little-endian layout (docs/quality-bench.md); the ppl field is rewritten by finish().
constexpr std::streamoff kPplOffset = 64;
constexpr std::streamoff kTokensOffset = 72;

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

template <typename T>
T get(const char*& p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}

std::string window_options(const ReferenceFingerprint& f) {
  return "-c " + std::to_string(f.n_ctx) + " --stride " + std::to_string(f.stride) + ", " +
         std::to_string(f.n_windows) + " windows";
}

std::string kv_name(GgmlType t) { return std::string(ggml_type_name(t)); }

}  // namespace

uint64_t text_fingerprint(const std::string& text) { return XXH64(text.data(), text.size(), 0); }

ReferenceWriter::ReferenceWriter(const std::string& path, const ReferenceHeader& h)
    : path_(path), out_(path, std::ios::binary | std::ios::trunc), n_vocab_(h.n_vocab), n_positions_(h.tokens.size()) {
  if (!out_) throw Error("cannot write reference '" + path + "'");
  std::string head(kReferenceMagic, sizeof kReferenceMagic);
  put(head, kReferenceVersion);
  put(head, h.n_vocab);
  put(head, static_cast<uint64_t>(h.tokens.size()));
  put(head, h.fingerprint.model);
  put(head, h.fingerprint.text);
  put(head, h.fingerprint.n_ctx);
  put(head, h.fingerprint.stride);
  put(head, h.fingerprint.n_windows);
  put(head, static_cast<uint32_t>(h.type_k));
  put(head, static_cast<uint32_t>(h.type_v));
  put(head, std::numeric_limits<double>::quiet_NaN());
  for (Token t : h.tokens) put(head, static_cast<int32_t>(t));
  out_.write(head.data(), static_cast<std::streamsize>(head.size()));
  if (!out_) throw Error("cannot write reference '" + path + "'");
}

void ReferenceWriter::append(const uint16_t* logprobs_f16) {
  if (written_ == n_positions_) throw Error("reference '" + path_ + "': more positions than its header declares");
  out_.write(reinterpret_cast<const char*>(logprobs_f16), static_cast<std::streamsize>(n_vocab_) * 2);
  if (!out_) throw Error("cannot write reference '" + path_ + "' (disk full?)");
  ++written_;
}

void ReferenceWriter::finish(double ppl) {
  if (written_ != n_positions_)
    throw Error("reference '" + path_ + "': " + std::to_string(written_) + " of " + std::to_string(n_positions_) +
                " positions written");
  out_.seekp(kPplOffset);
  out_.write(reinterpret_cast<const char*>(&ppl), sizeof ppl);
  out_.close();
  if (!out_) throw Error("cannot write reference '" + path_ + "'");
}

ReferenceReader::ReferenceReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
  if (!in_) throw Error("cannot open reference '" + path + "'");
  char head[kTokensOffset];
  in_.read(head, sizeof head);
  if (!in_ || std::memcmp(head, kReferenceMagic, sizeof kReferenceMagic) != 0)
    throw Error("'" + path + "' is not an agentkv bench quality reference (bad magic)");
  const char* p = head + sizeof kReferenceMagic;
  const auto version = get<uint32_t>(p);
  if (version != kReferenceVersion)
    throw Error("reference '" + path + "' has format version " + std::to_string(version) + ", this agentkv reads " +
                std::to_string(kReferenceVersion));
  header_.n_vocab = get<uint32_t>(p);
  const auto n_positions = get<uint64_t>(p);
  header_.fingerprint.model = get<uint64_t>(p);
  header_.fingerprint.text = get<uint64_t>(p);
  header_.fingerprint.n_ctx = get<uint32_t>(p);
  header_.fingerprint.stride = get<uint32_t>(p);
  header_.fingerprint.n_windows = get<uint64_t>(p);
  header_.type_k = static_cast<GgmlType>(get<uint32_t>(p));
  header_.type_v = static_cast<GgmlType>(get<uint32_t>(p));
  header_.ppl = get<double>(p);
  if (std::isnan(header_.ppl)) throw Error("reference '" + path + "' is incomplete (its run did not finish)");
  const uint64_t want = kTokensOffset + n_positions * 4 + n_positions * header_.n_vocab * 2ull;
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec || size != want)
    throw Error("reference '" + path + "' is " + std::to_string(size) + " bytes, its header says " + std::to_string(want) +
                " (truncated or not a reference)");
  header_.tokens.resize(n_positions);
  for (auto& t : header_.tokens) {
    int32_t v = 0;
    in_.read(reinterpret_cast<char*>(&v), sizeof v);
    t = v;
  }
  if (!in_) throw Error("cannot read reference '" + path + "'");
}

void ReferenceReader::require_matches(const ReferenceFingerprint& f, uint32_t n_vocab,
                                      const std::vector<Token>& tokens) const {
  const ReferenceFingerprint& r = header_.fingerprint;
  const std::string where = "reference '" + path_ + "' (saved with " + kv_name(header_.type_k) + "/" +
                            kv_name(header_.type_v) + " KV) ";
  const std::string again = "; save it again with --save-reference";
  if (r.model != f.model) throw Error(where + "was made with another model" + again);
  if (n_vocab != header_.n_vocab)
    throw Error(where + "has " + std::to_string(header_.n_vocab) + " vocabulary entries, the model " +
                std::to_string(n_vocab) + again);
  if (r.text != f.text) throw Error(where + "was made on another text file" + again);
  if (r.n_ctx != f.n_ctx || r.stride != f.stride || r.n_windows != f.n_windows)
    throw Error(where + "was made with " + window_options(r) + ", this run uses " + window_options(f) + again);
  if (tokens != header_.tokens) throw Error(where + "scored other tokens (another tokenizer?)" + again);
}

void ReferenceReader::read(uint16_t* logprobs_f16) {
  if (read_ == header_.tokens.size()) throw Error("reference '" + path_ + "': read past its last position");
  in_.read(reinterpret_cast<char*>(logprobs_f16), static_cast<std::streamsize>(header_.n_vocab) * 2);
  if (!in_) throw Error("cannot read reference '" + path_ + "'");
  ++read_;
}

}  // namespace agentkv::tools
