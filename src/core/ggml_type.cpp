#include "agentkv/ggml_type.h"

#include <array>
#include <cctype>
#include <stdexcept>
#include <string>

namespace agentkv {
namespace {
constexpr std::array<GgmlTypeInfo, 31> kTypes = {{
    {GgmlType::F32, "f32", 1, 4, false},
    {GgmlType::F16, "f16", 1, 2, false},
    {GgmlType::Q4_0, "q4_0", 32, 18, true},
    {GgmlType::Q4_1, "q4_1", 32, 20, true},
    {GgmlType::Q5_0, "q5_0", 32, 22, true},
    {GgmlType::Q5_1, "q5_1", 32, 24, true},
    {GgmlType::Q8_0, "q8_0", 32, 34, true},
    {GgmlType::Q8_1, "q8_1", 32, 36, true},
    {GgmlType::Q2_K, "q2_K", 256, 84, true},
    {GgmlType::Q3_K, "q3_K", 256, 110, true},
    {GgmlType::Q4_K, "q4_K", 256, 144, true},
    {GgmlType::Q5_K, "q5_K", 256, 176, true},
    {GgmlType::Q6_K, "q6_K", 256, 210, true},
    {GgmlType::Q8_K, "q8_K", 256, 292, true},
    {GgmlType::IQ4_NL, "iq4_nl", 32, 18, true},
    {GgmlType::IQ2_XXS, "iq2_xxs", 256, 66, true},
    {GgmlType::IQ2_XS, "iq2_xs", 256, 74, true},
    {GgmlType::IQ2_S, "iq2_s", 256, 82, true},
    {GgmlType::IQ3_XXS, "iq3_xxs", 256, 98, true},
    {GgmlType::IQ3_S, "iq3_s", 256, 110, true},
    {GgmlType::IQ4_XS, "iq4_xs", 256, 136, true},
    {GgmlType::MXFP4, "mxfp4", 32, 17, true},
    {GgmlType::I8, "i8", 1, 1, false},
    {GgmlType::I16, "i16", 1, 2, false},
    {GgmlType::I32, "i32", 1, 4, false},
    {GgmlType::I64, "i64", 1, 8, false},
    {GgmlType::F64, "f64", 1, 8, false},
    {GgmlType::BF16, "bf16", 1, 2, false},
    {GgmlType::TQ4, "tq4", 64, 34, true, true},
    {GgmlType::TQ3, "tq3", 64, 26, true, true},
    {GgmlType::TQC3, "tqc3", 32, 13, true, true},
}};
}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType t) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
  if (!info) throw std::logic_error("unknown ggml type id " + std::to_string(static_cast<uint32_t>(t)));
  return *info;
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const std::string want = lower(name);
  for (const auto& t : kTypes)
    if (lower(t.name) == want) return t.type;
  return std::nullopt;
}

}  // namespace agentkv
