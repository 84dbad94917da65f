// Our own statement of the type rules in llama.cpp's src/llama-quant.cpp (tensor_allows_quantization,
// llama_tensor_get_type_impl, tensor_type_fallback) restricted to the file types mkmodel writes,
// plus the converter's F32 exceptions (convert_hf_to_gguf.py). Rules for file types and
// architectures we never produce (Q2_K/Q3_K, Falcon, Llama-70B) are left out; the i-quant
// file types are mkmodel's own simple mixes (kIqFileTypes), not llama-quantize's. MXFP4_MOE is
// llama-quantize's rule: 3-D (expert) matrices in mxfp4, the rest q8_0.
#include "model/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>
#include <string>

#include "agentkv/error.h"

namespace agentkv::mkmodel {
namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }
bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// ggml_n_dims: trailing dimensions of size 1 do not count; a scalar is 1-D.
int effective_dims(std::span<const int64_t> ne) {
  int n = static_cast<int>(ne.size());
  while (n > 1 && ne[n - 1] == 1) --n;
  return std::max(n, 1);
}

// Block number parsed from "blk.N.<rest>", -1 for tensors outside the blocks.
int block_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int value = 0;
  size_t i = 4;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])))
    value = value * 10 + (name[i++] - '0');
  return (i < name.size() && name[i] == '.') ? value : -1;
}

// The categories llama-quantize's rules distinguish (first match wins, as there).
enum class Category { TokenEmbd, Output, AttnVLike, AttnK, AttnQ, AttnOutput, FfnUp, FfnGate, FfnDown, Other };

Category categorize(std::string_view name) {
  if (name == "output.weight") return Category::Output;
  if (name == "token_embd.weight") return Category::TokenEmbd;
  // attn_qkv (fused, also the Gated-DeltaNet input projection) and MLA's attn_kv_b are treated
  // like attn_v: current llama.cpp routes all three through the attn_v rules and counter.
  if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") ||
      contains(name, "attn_v.weight"))
    return Category::AttnVLike;
  if (contains(name, "attn_k.weight")) return Category::AttnK;
  if (contains(name, "attn_q.weight")) return Category::AttnQ;
  if (contains(name, "attn_output.weight")) return Category::AttnOutput;
  if (contains(name, "ffn_up")) return Category::FfnUp;
  if (contains(name, "ffn_gate")) return Category::FfnGate;
  if (contains(name, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

// llama-quantize only touches 2-D/3-D "*weight" tensors, and never norms, MoE routers or the
// short SSM convolution (tiny tensors where quantization error would dominate).
bool allows_quantization(std::string_view name, std::span<const int64_t> ne) {
  if (effective_dims(ne) < 2) return false;
  if (!ends_with(name, "weight")) return false;
  if (contains(name, "_norm.weight")) return false;
  if (contains(name, "ffn_gate_inp.weight")) return false;
  if (contains(name, "ssm_conv1d")) return false;
  return true;
}

// The i-quant file types and the one type each puts in its matrices (mkmodel's own mixes: every
// quantized matrix in that type, the output head in q6_K; not llama-quantize's per-layer rules).
constexpr struct {
  FileType file_type;
  GgmlType type;
  std::string_view name;
} kIqFileTypes[] = {
    {FileType::MostlyIQ4_XS, GgmlType::IQ4_XS, "iq4_xs"},   {FileType::MostlyIQ3_S, GgmlType::IQ3_S, "iq3_s"},
    {FileType::MostlyIQ3_XXS, GgmlType::IQ3_XXS, "iq3_xxs"}, {FileType::MostlyIQ2_XXS, GgmlType::IQ2_XXS, "iq2_xxs"},
    {FileType::MostlyIQ2_XS, GgmlType::IQ2_XS, "iq2_xs"},   {FileType::MostlyIQ2_S, GgmlType::IQ2_S, "iq2_s"},
};

std::optional<GgmlType> iq_file_type_tensor_type(FileType t) {
  for (const auto& f : kIqFileTypes)
    if (f.file_type == t) return f.type;
  return std::nullopt;
}

// Layers that get extra bits in the *_M mixes: the first and last eighth of the stack and every
// third layer in between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

GgmlType default_type(FileType t) {
  switch (t) {
    case FileType::AllF32: return GgmlType::F32;
    case FileType::MostlyF16: return GgmlType::F16;
    case FileType::MostlyQ8_0: return GgmlType::Q8_0;
    case FileType::MostlyQ4_K_M: return GgmlType::Q4_K;
    case FileType::MostlyQ5_K_M: return GgmlType::Q5_K;
    default: return iq_file_type_tensor_type(t).value_or(GgmlType::F16);
  }
}

int64_t block_size(GgmlType t) { return ggml_type_info(t).block_size; }

// Rows must hold whole blocks: K-quants (256) fall back to the 32-element type of similar size.
GgmlType fallback_for_row_length(const MixTensor& t, GgmlType wanted) {
  const int64_t ncols = t.ne.empty() ? 1 : t.ne[0];
  if (ncols % block_size(wanted) == 0) return wanted;
  GgmlType fallback;
  switch (wanted) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: fallback = GgmlType::Q4_0; break;
    case GgmlType::Q4_K: fallback = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: fallback = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: fallback = GgmlType::Q8_0; break;
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S:
    case GgmlType::IQ4_XS: fallback = GgmlType::IQ4_NL; break;  // llama.cpp's tensor_type_fallback
    default:
      throw Error("tensor " + t.name + ": row length " + std::to_string(ncols) +
                  " is not a multiple of " + std::to_string(block_size(wanted)) + " (needed by " +
                  std::string(ggml_type_name(wanted)) + ") and no fallback type exists");
  }
  // Still not a whole number of blocks (row length not a multiple of 32): keep F16.
  return ncols % block_size(fallback) == 0 ? fallback : GgmlType::F16;
}

}  // namespace

std::optional<FileType> file_type_from_name(std::string_view name) {
  std::string lower(name);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "f32") return FileType::AllF32;
  if (lower == "f16") return FileType::MostlyF16;
  if (lower == "q8_0") return FileType::MostlyQ8_0;
  if (lower == "q4_k_m") return FileType::MostlyQ4_K_M;
  if (lower == "q5_k_m") return FileType::MostlyQ5_K_M;
  if (lower == "mxfp4_moe") return FileType::MostlyMXFP4_MOE;
  for (const auto& f : kIqFileTypes)
    if (lower == f.name) return f.file_type;
  return std::nullopt;
}

std::string_view file_type_name(FileType t) {
  switch (t) {
    case FileType::AllF32: return "f32";
    case FileType::MostlyF16: return "f16";
    case FileType::MostlyQ8_0: return "q8_0";
    case FileType::MostlyQ4_K_M: return "q4_k_m";
    case FileType::MostlyQ5_K_M: return "q5_k_m";
    case FileType::MostlyMXFP4_MOE: return "mxfp4_moe";
    default:
      for (const auto& f : kIqFileTypes)
        if (f.file_type == t) return f.name;
  }
  return "?";
}

bool is_quantized_file_type(FileType t) { return t != FileType::AllF32 && t != FileType::MostlyF16; }

GgmlType converter_tensor_type(std::string_view name, std::span<const int64_t> ne, FileType t) {
  if (t == FileType::AllF32) return GgmlType::F32;
  // The converter keeps vectors, the SSM convolution and MoE routers in F32.
  if (effective_dims(ne) < 2) return GgmlType::F32;
  if (contains(name, "ssm_conv1d") || contains(name, "ffn_gate_inp.weight")) return GgmlType::F32;
  // Anything but a .weight (gpt-oss's 2-D expert biases) stays F32 as well.
  if (!name.ends_with(".weight")) return GgmlType::F32;
  return GgmlType::F16;
}

std::vector<size_t> quantize_order(std::span<const std::string> names) {
  std::vector<size_t> order(names.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = block_of(names[a]), lb = block_of(names[b]);
    if (la != lb) return la < lb;
    return names[a] < names[b];
  });
  return order;
}

std::vector<GgmlType> choose_tensor_types(std::span<const MixTensor> tensors, FileType ftype,
                                          int n_layer, int n_expert) {
  std::vector<GgmlType> out;
  out.reserve(tensors.size());
  if (!is_quantized_file_type(ftype)) {
    for (const auto& t : tensors) out.push_back(t.source_type);
    return out;
  }
  const GgmlType base = default_type(ftype);
  const bool k_mix = ftype == FileType::MostlyQ4_K_M || ftype == FileType::MostlyQ5_K_M;

  // Without output.weight the token embedding doubles as the output head and is treated as one.
  bool tied_embeddings = true;
  int n_attn_v = 0;
  for (const auto& t : tensors) {
    const Category c = categorize(t.name);
    if (c == Category::Output) tied_embeddings = false;
    if (c == Category::AttnVLike) ++n_attn_v;
  }
  int i_attn_v = 0;   // attn_v-like tensors seen so far (quantize order)
  int i_ffn_down = 0;  // ffn_down tensors seen so far (dense models: equals the layer)

  for (const auto& t : tensors) {
    if (!allows_quantization(t.name, t.ne)) {
      out.push_back(t.source_type);
      continue;
    }
    const Category c = categorize(t.name);
    GgmlType type = base;
    if (ftype == FileType::MostlyMXFP4_MOE) {
      // The output head (or tied embedding) and every 2-D matrix in q8_0, the experts in mxfp4.
      const bool head = c == Category::Output || (tied_embeddings && c == Category::TokenEmbd);
      type = !head && t.ne.size() > 2 && t.ne[2] > 1 ? GgmlType::MXFP4 : GgmlType::Q8_0;
    } else if (c == Category::Output || (tied_embeddings && c == Category::TokenEmbd)) {
      // The output head is the most sensitive matrix: Q6_K unless the mix is Q8_0 already, Q8_0
      // when rows are not whole K-blocks.
      if (t.ne[0] % block_size(type) != 0) type = GgmlType::Q8_0;
      else if (type != GgmlType::Q8_0) type = GgmlType::Q6_K;
    } else if (c == Category::TokenEmbd) {
      // an untied embedding is only gathered from: the mix's base type
    } else if (c == Category::AttnVLike) {
      if (k_mix && use_more_bits(i_attn_v, n_attn_v)) type = GgmlType::Q6_K;
      if (n_expert == 8) type = GgmlType::Q8_0;  // Mixtral-style 8-expert models
      ++i_attn_v;
    } else if (c == Category::AttnK) {
      if (n_expert == 8) type = GgmlType::Q8_0;
    } else if (c == Category::FfnDown) {
      // MoE files hold several ffn_down tensors per layer (experts, shared expert): the layer
      // comes from the name there, from the running count in dense models.
      int i_layer = i_ffn_down;
      if (n_expert > 1) {
        i_layer = block_of(t.name);
        if (i_layer < 0 || i_layer >= n_layer)
          throw Error("tensor " + t.name + ": cannot tell its layer (block count " +
                      std::to_string(n_layer) + ")");
      }
      if (k_mix && use_more_bits(i_layer, n_layer)) type = GgmlType::Q6_K;
      ++i_ffn_down;
    } else if (c == Category::AttnOutput) {
      if (n_expert == 8 && ftype == FileType::MostlyQ4_K_M) type = GgmlType::Q5_K;
    }
    out.push_back(fallback_for_row_length(t, type));
  }
  return out;
}

}  // namespace agentkv::mkmodel
