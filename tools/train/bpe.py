"""Byte-level BPE with Qwen2's pre-tokenizer regex: trains merges on a corpus, encodes text, and
writes a Hugging Face tokenizer.json / tokenizer_config.json that `agentkv mkmodel` loads (it maps
this regex to tokenizer.ggml.pre = "qwen2", a pre-tokenizer agentkv and llama.cpp support).
"""
import collections
import json

import regex

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_SPLIT = regex.compile(QWEN2_SPLIT)


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map (what ByteLevel writes in the vocab)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_CHARS = bytes_to_unicode()


def pre_tokenize(text):
    """Pre-tokens as byte-level strings."""
    return ["".join(BYTE_CHARS[b] for b in piece.encode("utf-8")) for piece in _SPLIT.findall(text)]


def train(texts, vocab_size):
    """Merges [(a, b)] learned from `texts` so that 256 bytes + merges + specials = vocab_size."""
    n_merges = vocab_size - 256 - len(SPECIAL_TOKENS)
    word_counts = collections.Counter()
    for t in texts:
        word_counts.update(pre_tokenize(t))
    words = [list(w) for w in word_counts]
    counts = list(word_counts.values())
    pair_counts = collections.Counter()
    where = collections.defaultdict(set)  # pair -> word indices holding it
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_counts[(a, b)] += counts[i]
            where[(a, b)].add(i)
    merges = []
    for _ in range(n_merges):
        if not pair_counts:
            break
        # Highest count, ties broken by the pair itself so the result does not depend on hashing.
        best = max(pair_counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        merged = best[0] + best[1]
        for i in list(where[best]):
            w, c = words[i], counts[i]
            for a, b in zip(w, w[1:]):  # take the word's old pairs out
                pair_counts[(a, b)] -= c
                if pair_counts[(a, b)] <= 0:
                    del pair_counts[(a, b)]
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == best[0] and w[j + 1] == best[1]:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for a, b in zip(out, out[1:]):
                pair_counts[(a, b)] += c
                where[(a, b)].add(i)
        del where[best]
    return merges


class Encoder:
    def __init__(self, merges):
        self.vocab = {}
        for ch in BYTE_CHARS.values():
            self.vocab[ch] = len(self.vocab)
        for a, b in merges:
            self.vocab.setdefault(a + b, len(self.vocab))
        for s in SPECIAL_TOKENS:
            self.vocab[s] = len(self.vocab)
        self.ranks = {pair: r for r, pair in enumerate(merges)}
        self.merges = merges
        self.cache = {}
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.byte_of = {c: b for b, c in BYTE_CHARS.items()}

    def _word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        parts = list(w)
        while len(parts) > 1:
            ranked = [(self.ranks.get((a, b), 1 << 30), k) for k, (a, b) in enumerate(zip(parts, parts[1:]))]
            r, k = min(ranked)
            if r == 1 << 30:
                break
            parts[k:k + 2] = [parts[k] + parts[k + 1]]
        ids = [self.vocab[p] for p in parts]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in pre_tokenize(text):
            out.extend(self._word(w))
        return out

    @staticmethod
    def from_tokenizer_json(path):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return Encoder([tuple(m) for m in doc["model"]["merges"]])

    def decode(self, ids):
        data = bytearray()
        for i in ids:
            t = self.id_to_token[i]
            if t in SPECIAL_TOKENS:
                data.extend(t.encode())
            else:
                data.extend(self.byte_of[c] for c in t)
        return data.decode("utf-8", errors="replace")

    def special(self, name):
        return self.vocab[name]


CHATML_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def write_hf_files(enc, tokenizer_json, tokenizer_config_json):
    added = [{"id": enc.vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for s in SPECIAL_TOKENS]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for t, i in enc.vocab.items() if t not in SPECIAL_TOKENS},
                  "merges": [[a, b] for a, b in enc.merges]},
    }
    with open(tokenizer_json, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    config = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|endoftext|>",
              "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 4096,
              "tokenizer_class": "Qwen2Tokenizer", "clean_up_tokenization_spaces": False,
              "chat_template": CHATML_TEMPLATE}
    with open(tokenizer_config_json, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
