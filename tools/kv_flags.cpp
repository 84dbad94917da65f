#include "tools/kv_flags.h"

#include "agentkv/kv_code.h"

#include <set>
#include <stdexcept>
#include <string>

namespace agentkv::tools {

GgmlType parse_kv_cache_type(const std::string& name, const char* option) {
  static const std::set<std::string> kAllowed = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1", "tq4", "tq3", "tqc3"};
  const auto type = ggml_type_from_name(name);
  if (!type || !kAllowed.count(name))
    throw std::invalid_argument(std::string(option) + ": unsupported cache type '" + name +
                                "' (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, tq4, tq3, tqc3)");
  return *type;
}

KvOptions read_kv_flags(Args& a) {
  KvOptions f;
  f.type_k = parse_kv_cache_type(a.str("-ctk", "--cache-type-k", "f16"), "-ctk");
  f.type_v = parse_kv_cache_type(a.str("-ctv", "--cache-type-v", "f16"), "-ctv");
  f.rotation = parse_kv_rotation_mode(a.str("--kv-rotation", "", "auto"));
  const long long seed = a.num("--kv-rotation-seed", "", 0);
  if (seed < 0) throw std::invalid_argument("--kv-rotation-seed must be non-negative");
  f.rotation_seed = static_cast<uint64_t>(seed);
  const long long hot = a.num("--kv-hot", "", 0);
  if (hot < 0 || hot > (1ll << 30)) throw std::invalid_argument("--kv-hot must be in [0, 2^30]");
  f.hot_cells = static_cast<uint32_t>(hot);
  const std::string tail = a.str("--kv-tail-type", "", "");
  f.tail_type_k = tail.empty() ? f.type_k : parse_kv_cache_type(tail, "--kv-tail-type");
  f.tail_type_v = tail.empty() ? f.type_v : parse_kv_cache_type(tail, "--kv-tail-type");
  if (!tail.empty() && hot == 0) throw std::invalid_argument("--kv-tail-type needs --kv-hot N (the rows that stay hot)");
  f.tail_dir = a.str("--kv-tail-dir", "", "");
  const std::string code = a.str("--kv-code", "", "");
  if (!code.empty()) f.code = load_kv_code(code);
  if ((f.type_k == GgmlType::TQC3 || f.type_v == GgmlType::TQC3) && !f.code)
    throw std::invalid_argument("tqc3 needs --kv-code FILE (a calibrated code: agentkv kv-calibrate)");
  if (!f.tail_dir.empty() && hot == 0) throw std::invalid_argument("--kv-tail-dir needs --kv-hot N (the rows that stay hot)");
  f.retrieval_heads = a.real("--kv-retrieval-heads", "", 1.0);
  if (!(f.retrieval_heads >= 0 && f.retrieval_heads <= 1))
    throw std::invalid_argument("--kv-retrieval-heads must be a fraction in [0, 1]");
  if (f.retrieval_heads < 1 && hot == 0)
    throw std::invalid_argument("--kv-retrieval-heads needs --kv-hot N (the window the other heads attend over)");
  f.swa_full = a.flag("--swa-full");
  const long long swa_cache = a.num("--swa-cache", "", 256);
  if (swa_cache < 0 || swa_cache > (1ll << 30)) throw std::invalid_argument("--swa-cache must be in [0, 2^30] MiB");
  f.swa_cache_bytes = static_cast<size_t>(swa_cache) << 20;
  return f;
}

const char* const kKvFlagsUsage =
    "  -ctk, --cache-type-k T          K cache type: f32 f16 bf16 q8_0 q4_0 q4_1 iq4_nl q5_0 q5_1 tq4 tq3 tqc3\n"
    "                                  (default f16)\n"
    "  -ctv, --cache-type-v T          V cache type (same choices, default f16)\n"
    "  --kv-rotation auto|on|off       Hadamard-rotate K/V rows: auto = the quantized ones, as llama.cpp (default)\n"
    "  --kv-rotation-seed N            random signs of the rotation (default 0: none, llama.cpp's matrix)\n"
    "  --kv-code FILE                  the calibrated code tqc3 rows are written under (agentkv kv-calibrate)\n"
    "  --kv-hot N                      keep at most N cells' K/V rows hot (-ctk/-ctv); older positions move to\n"
    "                                  the tail and attention reads both, merged by log-sum-exp (default 0: all hot)\n"
    "  --kv-tail-type T                the tail's K and V type (same choices; default: -ctk / -ctv, exact)\n"
    "  --kv-tail-dir DIR               keep the tail in files mapped from DIR (paged to disk by the OS: a\n"
    "                                  context beyond RAM; the files are unlinked at once)\n"
    "  --kv-retrieval-heads F          the tail keeps only the rows of this fraction of the KV heads, those a\n"
    "                                  probe finds retrieving (DuoAttention); the others attend over the\n"
    "                                  --kv-hot window alone (default 1: every head)\n"
    "  --swa-full                      sliding-window layers keep every row, as full-attention ones (default:\n"
    "                                  only each sequence's window; it resumes where a snapshot is)\n"
    "  --swa-cache MiB                 without --swa-full: RAM for the window rows of cached pages, so a prompt\n"
    "                                  leaving a cached chain resumes exactly there (default 256; 0: snapshots only)\n";

}  // namespace agentkv::tools
