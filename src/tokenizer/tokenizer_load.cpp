// Reading a tokenizer from a GGUF file (as llama.cpp does) or from Hugging Face files (as
// llama.cpp's converter does: convert_hf_to_gguf.py get_vocab_base + gguf-py SpecialVocab).
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"
#include "gguf/gguf.h"
#include "agentkv/tokenizer.h"
#include "tokenizer/vocab_defaults.h"

namespace agentkv {

namespace {

TokenType token_type_from_int(int64_t v) {
  return (v >= 0 && v <= 6) ? TokenType(v) : TokenType::Undefined;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::Reader& gguf) {
  const std::string& path = gguf.path();
  const auto& md = gguf.metadata();
  VocabData v;
  auto model = md.get_string("tokenizer.ggml.model");
  if (!model) throw Error(path + ": missing required key tokenizer.ggml.model");
  v.model = *model;
  v.pre = md.get_string("tokenizer.ggml.pre").value_or("default");
  const auto defaults = tokenizer::vocab_defaults(v.model, v.pre);
  if (!defaults)
    throw Error(path + ": tokenizer.ggml.model is '" + *model +
                "'; only 'gpt2' (byte-level BPE) and 'llama' (SentencePiece) are supported");
  const bool bpe = defaults->kind == tokenizer::VocabKind::Bpe;
  auto tokens = md.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) throw Error(path + ": missing required key tokenizer.ggml.tokens");
  v.tokens = std::move(*tokens);
  if (auto types = md.get_int_array("tokenizer.ggml.token_type")) {
    v.types.reserve(types->size());
    for (int64_t t : *types) v.types.push_back(token_type_from_int(t));
  }
  if (auto scores = md.get_float_array("tokenizer.ggml.scores")) v.scores.assign(scores->begin(), scores->end());
  auto merges = md.get_string_array("tokenizer.ggml.merges");
  if (bpe && !merges) throw Error(path + ": missing required key tokenizer.ggml.merges");
  if (merges) v.merges = std::move(*merges);

  const uint64_t n = v.tokens.size();
  auto special = [&](const char* key, Token fallback) -> Token {
    auto id = md.get_uint(key);
    if (!id) return fallback < Token(n) ? fallback : -1;
    return *id < n ? Token(*id) : -1;
  };
  v.bos = special("tokenizer.ggml.bos_token_id", defaults->bos);
  v.eos = special("tokenizer.ggml.eos_token_id", defaults->eos);
  v.eot = special("tokenizer.ggml.eot_token_id", -1);
  v.pad = special("tokenizer.ggml.padding_token_id", -1);
  v.unk = special("tokenizer.ggml.unknown_token_id", defaults->unk);
  // As llama.cpp: the model / pre-tokenizer's default unless the file says otherwise (Llama 3
  // files without the key still get their BOS).
  v.add_bos = md.get_bool("tokenizer.ggml.add_bos_token").value_or(defaults->add_bos);
  v.add_eos = md.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  v.add_space_prefix = md.get_bool("tokenizer.ggml.add_space_prefix").value_or(defaults->add_space_prefix);
  v.chat_template = md.get_string("tokenizer.chat_template").value_or("");
  v.model_name = md.get_string("general.name").value_or("");
  return std::make_unique<Tokenizer>(std::move(v), path);
}

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

// The pre-tokenizer regexes of Hugging Face tokenizer.json files and the tokenizer.ggml.pre
// value llama.cpp's converter writes for them.
const std::pair<const char*, const char*> kKnownSplitRegexes[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen35"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    // OpenAI's o200k (gpt-oss's tokenizer.json).
    {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
     "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "gpt-4o"},
};

std::string detect_pre(const nlohmann::json& pre_tokenizer, const std::string& path) {
  std::vector<const nlohmann::json*> steps;
  if (pre_tokenizer.is_object() && pre_tokenizer.value("type", "") == "Sequence") {
    for (const auto& p : pre_tokenizer.at("pretokenizers")) steps.push_back(&p);
  } else if (pre_tokenizer.is_object()) {
    steps.push_back(&pre_tokenizer);
  }
  std::string regex;
  bool byte_level_regex = false;
  for (const auto* p : steps) {
    const std::string type = p->value("type", "");
    if (type == "Split" && p->contains("pattern") && (*p)["pattern"].contains("Regex"))
      regex = (*p)["pattern"]["Regex"].get<std::string>();
    if (type == "ByteLevel" && p->value("use_regex", true)) byte_level_regex = true;
  }
  for (const auto& [re, pre] : kKnownSplitRegexes)
    if (regex == re) return pre;
  if (regex.empty() && byte_level_regex) return "gpt-2";
  throw Error(path + ": unsupported pre-tokenizer (only Qwen2 / Qwen3.5 / Llama 3 split regexes and plain "
                     "GPT-2 ByteLevel are recognised)");
}

// An added-token reference in tokenizer_config.json: a string, {"content": ...} or null.
std::optional<std::string> token_content(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

static std::unique_ptr<Tokenizer> load_hf(const std::string& tokenizer_json, const std::string& config_path,
                                          const std::string& model_config_path) {
  const nlohmann::json tj = read_json(tokenizer_json);
  VocabData v;
  try {
    const auto& model = tj.at("model");
    if (model.value("type", "") != "BPE")
      throw Error(tokenizer_json + ": model.type is not BPE; only byte-level BPE tokenizers are supported");
    v.model = "gpt2";
    v.pre = detect_pre(tj.value("pre_tokenizer", nlohmann::json()), tokenizer_json);

    // Vocabulary: model.vocab plus added_tokens; ids nobody names become "[PADn]" (unused).
    std::vector<std::pair<std::string, int64_t>> entries;
    for (const auto& [text, id] : model.at("vocab").items()) entries.emplace_back(text, id.get<int64_t>());
    struct Added {
      int64_t id;
      std::string content;
      bool special;
    };
    std::vector<Added> added;
    if (tj.contains("added_tokens"))
      for (const auto& a : tj["added_tokens"])
        added.push_back({a.at("id").get<int64_t>(), a.at("content").get<std::string>(), a.value("special", false)});
    int64_t max_id = -1;
    for (const auto& e : entries) max_id = std::max(max_id, e.second);
    for (const auto& a : added) max_id = std::max(max_id, a.id);
    if (max_id < 0) throw Error(tokenizer_json + ": the vocabulary is empty");
    if (max_id >= (int64_t(1) << 31) - 1) throw Error(tokenizer_json + ": token id out of range");
    for (const auto& e : entries)
      if (e.second < 0) throw Error(tokenizer_json + ": negative token id for '" + e.first + "'");
    const size_t n = size_t(max_id) + 1;
    v.tokens.assign(n, std::string());
    v.types.assign(n, TokenType::Unused);
    std::vector<bool> named(n, false);
    for (const auto& [text, id] : entries) {
      v.tokens[id] = text;
      v.types[id] = TokenType::Normal;
      named[id] = true;
    }
    for (const auto& a : added) {
      if (a.id < 0) throw Error(tokenizer_json + ": negative id for added token '" + a.content + "'");
      if (a.special) {
        v.tokens[a.id] = a.content;
        v.types[a.id] = TokenType::Control;
      } else {
        std::string text = a.content;  // the converter writes user-defined tokens with real spaces
        for (size_t p; (p = text.find("\xe2\x96\x81")) != std::string::npos;) text.replace(p, 3, " ");
        v.tokens[a.id] = text;
        v.types[a.id] = TokenType::UserDefined;
      }
      named[a.id] = true;
    }
    for (size_t i = 0; i < n; ++i)
      if (!named[i]) v.tokens[i] = "[PAD" + std::to_string(i) + "]";

    for (const auto& m : model.at("merges")) {
      if (m.is_string())
        v.merges.push_back(m.get<std::string>());
      else
        v.merges.push_back(m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(tokenizer_json + ": unexpected structure: " + e.what());
  }

  bool add_bos_given = false;
  auto id_of = [&](const std::string& text) -> Token {
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokens[i] == text) return Token(i);
    return -1;
  };
  if (!config_path.empty()) {
    const nlohmann::json cj = read_json(config_path);
    if (auto t = token_content(cj.value("bos_token", nlohmann::json()))) v.bos = id_of(*t);
    if (auto t = token_content(cj.value("eos_token", nlohmann::json()))) v.eos = id_of(*t);
    if (auto t = token_content(cj.value("pad_token", nlohmann::json()))) v.pad = id_of(*t);
    if (cj.contains("add_bos_token") && cj["add_bos_token"].is_boolean()) {
      v.add_bos = cj["add_bos_token"].get<bool>();
      add_bos_given = true;
    }
    if (cj.contains("chat_template")) {
      const auto& ct = cj["chat_template"];
      if (ct.is_string()) {
        v.chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {  // named templates: take "default"
        for (const auto& e : ct)
          if (e.value("name", "") == "default") v.chat_template = e.value("template", "");
      }
    }
  }
  if (!model_config_path.empty()) {
    const nlohmann::json mj = read_json(model_config_path);
    auto fill = [&](Token& id, const char* key) {
      if (id < 0 && mj.contains(key) && mj[key].is_number_integer()) id = mj[key].get<Token>();
    };
    fill(v.bos, "bos_token_id");
    fill(v.eos, "eos_token_id");
  }
  // Llama 3's tokenizer_config.json leaves add_bos_token out (its post-processor adds BOS):
  // llama.cpp's default for the pre-tokenizer then, where there is a BOS to add.
  if (!add_bos_given && v.bos >= 0) v.add_bos = tokenizer::vocab_defaults(v.model, v.pre)->add_bos;
  return std::make_unique<Tokenizer>(std::move(v), tokenizer_json);
}

std::unique_ptr<Tokenizer> Tokenizer::from_hf_files(const std::string& tokenizer_json,
                                                    const std::string& tokenizer_config_json) {
  return load_hf(tokenizer_json, tokenizer_config_json, "");
}

std::unique_ptr<Tokenizer> Tokenizer::from_hf_files(const std::string& tokenizer_json,
                                                    const std::string& tokenizer_config_json,
                                                    const std::string& model_config_json) {
  return load_hf(tokenizer_json, tokenizer_config_json, model_config_json);
}

}  // namespace agentkv
