#!/usr/bin/env python3
"""hf_tokenizers_vectors.py — tokenizer vectors for m3 from HF `tokenizers`.

Trains small byte-level BPE tokenizers with the HF `tokenizers` library on a
corpus generated here deterministically (stdlib `random`, fixed seeds), then
encodes a held-out corpus with each and writes, per tokenizer,

    OUT/<name>/tokenizer.json       the trained tokenizer (as HF saves it, or
                                    edited as noted in info.json)
    OUT/<name>/expected.safetensors ids / id_offsets            encode(text)
                                    ids_nospecial / ..._offsets encode with
                                        encode_special_tokens=True
                                    decoded / decoded_offsets   UTF-8 bytes of
                                        decode(ids, skip_special_tokens=False)
    OUT/<name>/info.json            settings, HF tokenizers version
    OUT/inputs.safetensors          text (uint8 bytes) / text_offsets (int64):
                                    case i = text[off[i]:off[i+1]], raw bytes,
                                    possibly invalid UTF-8
    OUT/manifest.json

Invalid UTF-8 rule (spec M3-TOK): a byte string is decoded with
bytes.decode('utf-8', 'replace') before HF encodes it; m3 does the same
replacement in C on the raw bytes.

Needs the `tokenizers`, `numpy` and `safetensors` packages (the device
machine has them). Usage: python3 tools/hf_tokenizers_vectors.py OUTDIR
Spec clauses: M3-TOK-* (vectors for the byte-level BPE tokenizer).
"""
import json
import os
import random
import sys

import numpy as np
from safetensors.numpy import save_file
import tokenizers
from tokenizers import Tokenizer, Regex, AddedToken
from tokenizers import models, pre_tokenizers, decoders, trainers

GENERATOR_VERSION = 1

# MiniMax-family split regex as recorded by TOK (spec notes E.1): the
# punctuation alternative ends in [\r\n]*.
RE_MINIMAX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
              r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
              r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# The o200k / llama.cpp copy: [\r\n/]* after punctuation.
RE_O200K = RE_MINIMAX.replace(r"[\r\n]*|\s*", r"[\r\n/]*|\s*")
assert RE_O200K != RE_MINIMAX
# cl100k-style.
RE_CL100K = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The MiniMax-M3 special-token table (spec notes E.1), ids 200000..200060 in
# order. Added after the trained vocab here (same strings, same order).
MINIMAX_SPECIALS = [
    "]!p~[", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<reponame>",
    "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>",
    "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
    "<empty_output>", "<commit_before>", "<commit_msg>", "<commit_after>", "]~b]", "[e~[",
    "]!d~[", "<function_call>", "<code_interpreter>", "]<]speech[>[", "]<]image[>[",
    "]<]video[>[", "]<]start of speech[>[", "]<]end of speech[>[", "]<]start of image[>[",
    "]<]end of image[>[", "]<]start of video[>[", "]<]end of video[>[", "]<]vision pad[>[",
    "]~!b[", "<jupyter_error>", "<add_file>", "<delete_file>", "<rename_file>", "<edit_file>",
    "<commit_message>", "<empty_source_file>", "<repo_struct>", "<code_context>",
    "<file_content>", "<source_files>", "<pr_start>", "<review_comment>", "<filepath>",
    "<file_sep>", "<think>", "</think>", "<tool_call>", "</tool_call>", "]<]frame[>[",
    "]<]start of frame[>[", "]<]end of frame[>[", "<|content_altered_placeholder|>",
    "]<]minimax[>[", "<mm:think>", "</mm:think>",
]
assert len(MINIMAX_SPECIALS) == 61

# ---------------------------------------------------------------- corpus
EN = ("the of and to in is was for on that with as by at from it this be are "
      "have not but had his they which you were her she there one all we can "
      "would their what so up out if about who get when make like time no just "
      "him know take people into year your good some could them see other than "
      "then now look only come its over think also back after use two how our "
      "work first well way even new want because any these give day most us "
      "tokenizer merge byte model vocabulary sparse attention expert router "
      "Paris London Tokyo MiniMax HuggingFace Python JSON UTF Unicode").split()
FR = "été déjà garçon où naïve crème brûlée français à côté cœur Noël œuvre façade".split()
DE = "Straße größer Übermäßig Fußgänger schön Äpfel Öl über müssen Grüße".split()
RU = "привет мир быстрый кот Москва язык модель данные токен слово".split()
EL = "καλημέρα κόσμε γλώσσα Αθήνα λόγος ΣΊΣΥΦΟΣ".split()
AR = "مرحبا بالعالم اللغة العربية كتاب مدرسة الذكاء الاصطناعي".split()
HI = "नमस्ते दुनिया भाषा हिन्दी किताब विद्यालय मॉडल".split()
ZH = list("的一是不了在人有我他这中大来上国个到说们为子和你地出道也时年") + [
    "人工智能", "语言模型", "分词器", "北京", "上海", "你好世界"]
JA = ["こんにちは", "世界", "トークナイザー", "日本語", "カタカナ", "ひらがな", "東京", "ｶﾀｶﾅ"]
KO = ["안녕하세요", "세계", "한국어", "토크나이저", "서울"]
TH = ["สวัสดี", "ภาษาไทย"]
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "❤️", "🧑🏿‍💻", "✨", "🤖", "1️⃣",
         "👩‍🔬", "🐈‍⬛"]
CONTRACTIONS = ["don't", "I'm", "you're", "we've", "they'll", "he'd", "it's", "DON'T", "I'M",
                "YOU'RE", "We'Ve", "THEY'LL", "She'D", "It'S", "O'Neil", "rock'n'roll",
                "'tis", "l'été", "ſ's", "it’s"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "if __name__ == '__main__':\n    main()\n",
    "const x = {a: 1, b: [2, 3]};  // comment\n",
    "SELECT id, name FROM users WHERE age >= 18;\r\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }\n",
    "path/to/file.txt  ../up/../../x  https://example.com/a?b=c&d=e#f\n",
    "    \t  mixed\t\ttabs   and    spaces\n",
    "x=1;y=2;z=x+y**2//3%4\n",
    "<div class=\"a\">Hello &amp; bye</div>\n",
]
SYMBOLS = list("!@#$%^&*()_+-=[]{}|;:'\",.<>/?`~\\") + ["—", "–", "…", "«", "»", "“", "”",
                                                        "€", "£", "¥", "°", "±", "×", "÷",
                                                        "→", "∑", "√", "∞", "©", "®"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "    ", "\u00a0",
          "\u3000", "\u2003", " \t\n", "\u2028", "\x0b", "\x0c", "\x85"]
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "\u0915\u094d\u0937", "o\u0302\u0323"]


def number(rng):
    k = rng.random()
    if k < 0.3:
        return str(rng.randrange(10))
    if k < 0.6:
        return str(rng.randrange(10 ** rng.randrange(1, 12)))
    if k < 0.8:
        return f"{rng.uniform(-1000, 1000):.{rng.randrange(1, 6)}f}"
    if k < 0.9:
        return "٣٤٥" if rng.random() < 0.5 else "१२३४"
    return f"{rng.randrange(10**6):,}"


def piece(rng):
    k = rng.random()
    if k < 0.30:
        w = rng.choice(EN)
        r = rng.random()
        return w.upper() if r < 0.08 else (w.capitalize() if r < 0.25 else w)
    if k < 0.36:
        return rng.choice(FR + DE)
    if k < 0.41:
        return rng.choice(RU + EL)
    if k < 0.45:
        return rng.choice(AR)
    if k < 0.49:
        return rng.choice(HI)
    if k < 0.56:
        return "".join(rng.choice(ZH) for _ in range(rng.randrange(1, 6)))
    if k < 0.60:
        return rng.choice(JA + KO + TH)
    if k < 0.64:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randrange(1, 4)))
    if k < 0.70:
        return rng.choice(CONTRACTIONS)
    if k < 0.78:
        return number(rng)
    if k < 0.85:
        return "".join(rng.choice(SYMBOLS) for _ in range(rng.randrange(1, 4)))
    if k < 0.87:
        return rng.choice(COMBINING)
    if k < 0.90:
        return rng.choice(CODE)
    return rng.choice(SPACES)


def sentence(rng):
    parts = []
    for _ in range(rng.randrange(1, 25)):
        parts.append(piece(rng))
        parts.append(" " if rng.random() < 0.75 else rng.choice(SPACES + ["", ",", ". "]))
    return "".join(parts)


def training_corpus(seed, n):
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)]


def heldout_cases(seed, n):
    """Held-out inputs as raw bytes (some deliberately not valid UTF-8)."""
    rng = random.Random(seed)
    cases = []
    fixed = [
        "", " ", "a", "Hello world", " Hello", "  leading", "trailing  ", "   ", "\n", "\n\n\n",
        "a\r\nb", "x  \n  y", "tab\tsep", "   x", "word   ", "\t\t\n  \t",
        "I'm sure you're right, we'll see; they'd've DON'T I'M YOU'RE",
        "1 12 123 1234 12345 123456 1234567",
        "3.14159 -2.5e10 1,000,000 0x1F 007",
        "foo//bar/ baz /qux\n/ end", "a!!!\n\n\nb", "??\r\n\r\n", "...\n/",
        "日本語のテキストと中文混合", "안녕 世界 hello", "مرحبا بالعالم 123",
        "नमस्ते दुनिया", "Ελληνικά ΚΕΦΑΛΑΙΑ", "Привет, мир!",
        "👨‍👩‍👧‍👦 family 🏳️‍🌈 flag 🇫🇷🇯🇵 👍🏽👍🏿", "e\u0301 vs é", "\u00a0nbsp\u3000ideo",
        "\u2028line sep\u2029para", "ǅungla ǈj Ǌ", "ſ's K's 'S 'ſ",
        "ﬁnance ﬀ", "\U0001d400\U0001d401 math", "\U0010fffd\ue000 private",
        "\x00\x01\x1f\x7f controls", "ab\u200bcd\u200dzwj", "x" * 300, " " * 257 + "a",
        "\n" * 40 + "z", "ab" * 200, "😀" * 60, "中" * 100,
        "]~!b[]~b]system\nYou are a helpful assistant.[e~[\n]~b]user\nhi[e~[\n]~b]ai\n<mm:think>",
        "<mm:think>reason</mm:think>answer[e~[", "]<]image[>[describe ]<]video[>[ please",
        "text ]~b] inside <tool_call>x</tool_call>]<]minimax[>[", "]~b]]~b][e~[[e~[",
        "<mm:think", "mm:think>", "]~b", "[e~", "hello world and hello  world",
        "say hello world!", "xhello worldx", "<tag> a <tag>b< tag>", "Straße STRASSE",
    ]
    for s in fixed:
        cases.append(s.encode("utf-8"))
    invalid = [
        b"\xff", b"abc\x80def", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(", b"\xf0\x9f\x98",
        b"\xf0\x9f\x98 x", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf5\x80\x80\x80", b"\xf4\x90\x80\x80",
        b"\xe0\x80\x80", b"ok \xfe\xfe ok", b"\x80\x80\x80", b"\xf0\x90\x80\xf0\x9f\x98\x80",
        "日本".encode() + b"\xe6\x97" + "語".encode(), b"]~b]\xffuser",
    ]
    cases.extend(invalid)
    while len(cases) < n:
        s = sentence(rng)
        if rng.random() < 0.2:
            s = s + rng.choice(MINIMAX_SPECIALS) + sentence(rng)
        if rng.random() < 0.03:
            b = bytearray(s.encode("utf-8"))
            if b:
                b[rng.randrange(len(b))] = rng.choice([0x80, 0xbf, 0xc0, 0xe0, 0xf0, 0xff])
            cases.append(bytes(b))
            continue
        cases.append(s.encode("utf-8"))
    return cases


# ---------------------------------------------------------------- tokenizers
def train(vocab_size, split_re, gpt2_prefix_space=None, corpus=None):
    tok = Tokenizer(models.BPE())
    if split_re is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(gpt2_prefix_space),
                                                     use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split_re), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def edit_json(tok, fn):
    d = json.loads(tok.to_str())
    fn(d)
    return Tokenizer.from_str(json.dumps(d, ensure_ascii=False))


def merges_as_strings(d):
    d["model"]["merges"] = [m if isinstance(m, str) else m[0] + " " + m[1]
                            for m in d["model"]["merges"]]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "vectors/tokenizer"
    os.makedirs(out, exist_ok=True)
    corpus = training_corpus(1234, 6000)
    cases = heldout_cases(5678, 700)
    joined = b"\n".join(c for c in cases[:400])
    cases.append(joined)  # one long case
    texts = [c.decode("utf-8", "replace") for c in cases]

    specs = []

    def spec(name, tok, note, config=None):
        specs.append((name, tok, note, config))

    t = train(300, RE_MINIMAX, corpus=corpus)
    t.add_special_tokens(MINIMAX_SPECIALS)
    spec("minimax_300", t, "MiniMax split regex ([\\r\\n]*), 300 tokens + MiniMax specials")
    t = train(1000, RE_MINIMAX, corpus=corpus)
    t.add_special_tokens(MINIMAX_SPECIALS)
    spec("minimax_1000", t, "MiniMax split regex, 1000 tokens + MiniMax specials",
         {"bos_token": "]~!b[", "eos_token": {"content": "[e~[", "special": True},
          "chat_template": "{{ bos_token }}...", "tokenizer_class": "GPT2Tokenizer"})
    t = train(4000, RE_MINIMAX, corpus=corpus)
    t.add_special_tokens(MINIMAX_SPECIALS)
    spec("minimax_4000", t, "MiniMax split regex, 4000 tokens + MiniMax specials")
    t = train(1000, RE_O200K, corpus=corpus)
    t.add_special_tokens(MINIMAX_SPECIALS)
    t = edit_json(t, merges_as_strings)
    spec("o200k_slash_1000", t, "o200k/llama.cpp regex ([\\r\\n/]*), merges as 'a b' strings")
    t = train(1000, None, gpt2_prefix_space=True, corpus=corpus)
    spec("gpt2_prefix_1000", t, "ByteLevel(add_prefix_space=True, use_regex=True): GPT-2 regex")
    t = train(1000, RE_CL100K, corpus=corpus)
    t.add_tokens([
        AddedToken("hello world", single_word=True, lstrip=False, rstrip=False, normalized=True),
        AddedToken("<tag>", single_word=False, lstrip=True, rstrip=True, normalized=False),
        AddedToken("Straße", normalized=True),
        AddedToken("world", single_word=False, normalized=False),
    ])
    t.add_special_tokens(["]~b]", "[e~["])
    t = edit_json(t, lambda d: d["model"].__setitem__("ignore_merges", True))
    spec("cl100k_added_ignore_merges_1000", t,
         "cl100k-style regex, ignore_merges=true, non-special added tokens with "
         "single_word/lstrip/rstrip/normalized flags")

    inputs = {
        "text": np.frombuffer(b"".join(cases), dtype=np.uint8).copy(),
        "text_offsets": np.array(np.cumsum([0] + [len(c) for c in cases]), dtype=np.int64),
    }
    save_file(inputs, os.path.join(out, "inputs.safetensors"))

    manifest = {"suite": "m3-tokenizer-vectors", "generator": "tools/hf_tokenizers_vectors.py",
                "generator_version": GENERATOR_VERSION,
                "hf_tokenizers_version": tokenizers.__version__,
                "invalid_utf8_rule": "bytes.decode('utf-8', 'replace') before encode",
                "n_cases": len(cases), "tokenizers": []}
    for name, tok, note, config in specs:
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        if config is not None:
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump(config, f, indent=1)
        # Re-load from the saved file: what m3 reads is what HF encodes with.
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        enc = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        tok.encode_special_tokens = True
        enc_ns = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        tok.encode_special_tokens = False
        dec = [tok.decode(ids, skip_special_tokens=False).encode("utf-8") for ids in enc]
        roundtrip = sum(1 for text, d_ in zip(texts, dec) if d_ == text.encode("utf-8"))

        def flat(lists, dtype):
            off = np.array(np.cumsum([0] + [len(x) for x in lists]), dtype=np.int64)
            cat = np.array([v for x in lists for v in x], dtype=dtype)
            return cat, off

        ids, ido = flat(enc, np.int32)
        ids2, ido2 = flat(enc_ns, np.int32)
        db = np.frombuffer(b"".join(dec), dtype=np.uint8).copy()
        dbo = np.array(np.cumsum([0] + [len(x) for x in dec]), dtype=np.int64)
        save_file({"ids": ids, "id_offsets": ido, "ids_nospecial": ids2,
                   "ids_nospecial_offsets": ido2, "decoded": db, "decoded_offsets": dbo},
                  os.path.join(d, "expected.safetensors"))
        info = {"name": name, "note": note, "vocab_size": tok.get_vocab_size(),
                "hf_tokenizers_version": tokenizers.__version__, "n_cases": len(cases),
                "n_ids": int(ids.size), "decode_roundtrip_cases": roundtrip}
        with open(os.path.join(d, "info.json"), "w") as f:
            json.dump(info, f, indent=1)
        manifest["tokenizers"].append(name)
        print(name, info["vocab_size"], int(ids.size), "roundtrip", roundtrip, "/", len(cases),
              flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
