#!/usr/bin/env python3
"""Reference token ids for lorakv's BPE tokenizer parity test, from llama.cpp itself
(llama-cpp-python, vocabulary only).

Builds a deterministic corpus (fixed seed) of varied strings, tokenizes each with
llama.cpp and writes one line per case:

    hex(text bytes) <TAB> ids (space-separated) <TAB> hex(detokenized bytes) <TAB> parse_special

`parse_special` is 1 or 0 (llama.cpp's `special` flag: whether control tokens written in
the text are recognised); detokenization renders special tokens as text. Lines starting
with '#' are comments. tests/formats/tokenizer_test.cpp reads the file.

Usage: tokenizer_oracle.py --model SmolLM2-135M-Instruct.Q4_1.gguf --out tokenizer_cases.txt
"""
import argparse
import os
import random

SEED = 20260101

WORDS = ("the of and to in is was for that with as on by at from his her which this be are "
         "not have had were but they all one their an there been has more when will would "
         "who so if no out up what about into than them can only other new some could time "
         "these two may then do first any my now such like our over man me even most made "
         "after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world "
         "still own see men work long get here between both life being under never day same "
         "another know while last might us great old year off come since against go came "
         "right used take three tokenizer attention transformer adapter cache kernel").split()
ACCENTED = ("café naïve résumé façade jalapeño über straße Ærø Zürich señor crème brûlée "
            "déjà vu coöperate Ångström fiancée Łódź Dvořák São Paulo Kraków Ōsaka").split()
CJK = ("你好世界 我们正在测试分词器 東京は日本の首都です こんにちは カタカナ ひらがな "
       "안녕하세요 한국어 中文字符 漢字 机器学习 人工智能").split()
EMOJI = ["😀", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "❤️", "🧑‍💻", "🤖", "✨", "🎉",
         "👩🏾‍🔬", "🐍", "☕", "⚡", "🫠", "🪿", "1️⃣", "©️"]
SCRIPTS = ("مرحبا بالعالم اللغة العربية Привет мир русский язык नमस्ते दुनिया हिन्दी भाषा "
           "สวัสดีชาวโลก ภาษาไทย Γειά σου κόσμε שלום עולם Ελληνικά ქართული Հայերեն").split()
PUNCT = list("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'") + ["...", "--", "?!", "»", "«", "—", "–", "…",
                                                       "¿", "¡", "§", "©", "®", "€", "£", "¥"]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "if (ptr == nullptr) { throw std::runtime_error(\"null\"); }",
    "    x = [1, 2, 3]\n    y = {k: v for k, v in d.items()}\n",
    "#include <vector>\nint main() { return 0; }\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "const re = /^[a-z]+$/i; // regex\n",
    "git commit -m 'fix: handle   spaces'\n",
    "<div class=\"x\">&nbsp;</div>",
    "x+=1;y-=2;z*=3;w/=4;",
    "  \t  indented\n\n\n    more\r\n",
    "0x1F600 == 128512 && 0b1010 != 012",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>",
            "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
            "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>",
            "<jupyter_output>", "<jupyter_script>", "<empty_output>"]
WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000", "\u2028",
              "\u0085", "\u2009", "\u000b", "\u000c", "\u200b", "\u1680", "\u205f"]
# Codepoints assigned in Unicode 15.0 / 15.1: they tell a 14.0 table from llama.cpp's 15.1.
RECENT = ["\u0cf3", "\U00011f04", "\U0001e4d0", "\U0001e4f0", "\U0002ebf0", "\u31ef",
          "\u2ffc", "\U0001f6dc", "\U0001fa75", "\U00011b00", "\U0001e030"]

FIXED = [
    "", " ", "  ", "   ", "\n", "\n\n", "\t", " \t\n ", "a", "ab  ", "  ab", "a  b", "a \n b",
    "The capital of France is", "Hello world! 123", "Hello, world!", "hello   world   ",
    "I'm", "don't", "we're", "they've", "she'll", "he'd", "it's", "IT'S", "WE'LL", "We'Re",
    "'s", "''s", "'", "x'", "' s", "'ll've'd", "rock'n'roll", "O'Neil's",
    "1234567890", "3.14159", "1,000,000", "2026-11-29", "v1.2.3", "abc123def", " 42 ",
    "٣٤٥", "²³", "½¾", "Ⅻ", "१२३", "𝟙𝟚𝟛", "①②", "x²+y²",
    "a\u00a0b", "a\u3000b", "a\u2028b", "a\u0085b", "a\u200bb", "a\r\nb", "a\rb", "end   ",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|>", "<|im_start|", "<|im_end|", "<|im_start|>>", "<<|im_end|>",
    "text<|endoftext|>more", " <|im_start|> ", "<reponame><repo_name>", "<file_sep>x<filename>",
    "\u0378\u0379\u0380", "\ue000\uf8ff", "\U000f0000", "\x00\x01\x1f\x7f", "\ufeffBOM", "\ufffd",
    "e\u0301", "n\u0303o", "\u0915\u094d\u0937", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "👍🏽👍",
]


def rand_prose(rng):
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 25))]
    if rng.random() < 0.7:
        words[0] = words[0].capitalize()
    text = ""
    for w in words:
        text += (" " if text else "") + w
        if rng.random() < 0.15:
            text += rng.choice([",", ";", ":", " -", "'s", "'t", "'re", "'ll", "'LL", "'S"])
    return text + rng.choice([".", "!", "?", "...", "", "\n"])


def rand_mixed(rng):
    pools = [WORDS, ACCENTED, CJK, EMOJI, SCRIPTS, PUNCT, WHITESPACE, RECENT, SPECIALS]
    parts = []
    for _ in range(rng.randint(1, 14)):
        pool = rng.choice(pools)
        parts.append(rng.choice(pool))
        if rng.random() < 0.5:
            parts.append(rng.choice([" ", "", "", "\n", "  ", "\t"]))
        if rng.random() < 0.1:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
    return "".join(parts)


def rand_codepoints(rng):
    out = []
    for _ in range(rng.randint(1, 24)):
        r = rng.random()
        if r < 0.25:
            cpt = rng.randint(0x20, 0x7E)
        elif r < 0.6:
            cpt = rng.randint(0x80, 0xFFFF)
        elif r < 0.9:
            cpt = rng.randint(0x10000, 0x10FFFF)
        else:
            cpt = rng.choice([0x20, 0x09, 0x0A, 0x27, 0x30, 0xA0, 0x3000, 0x2028])
        if 0xD800 <= cpt <= 0xDFFF:  # surrogates cannot be encoded as UTF-8
            cpt = 0xFFFD
        out.append(chr(cpt))
    return "".join(out)


def rand_invalid_bytes(rng):
    # Random bytes, mostly invalid UTF-8. Lead bytes 0xF4..0xF7 are left out: llama.cpp
    # throws (and aborts the process) on decoded values above U+10FFFF.
    pool = [b for b in range(256) if not 0xF4 <= b <= 0xF7]
    data = bytes(rng.choice(pool) for _ in range(rng.randint(1, 16)))
    return data


def rand_whitespace(rng):
    return "".join(rng.choice(WHITESPACE + ["a", "b", "x1", ".", "word"])
                   for _ in range(rng.randint(1, 12)))


def rand_chat(rng):
    turns = []
    for _ in range(rng.randint(1, 4)):
        role = rng.choice(["system", "user", "assistant", "tool"])
        body = rng.choice([rand_prose, rand_mixed])(rng)
        turns.append(f"<|im_start|>{role}\n{body}<|im_end|>\n")
    if rng.random() < 0.5:
        turns.append("<|im_start|>assistant\n")
    return "".join(turns)


def rand_long(rng):
    paras = [rng.choice([rand_prose, rand_mixed, rand_chat])(rng) for _ in range(rng.randint(40, 120))]
    return "\n\n".join(paras) + "".join(rng.choice(CODE) for _ in range(8))


def build_corpus():
    rng = random.Random(SEED)
    cases = [(t.encode("utf-8"), True) for t in FIXED]
    cases += [(t.encode("utf-8"), True) for t in SPECIALS + EMOJI + RECENT + CODE + SCRIPTS]
    makers = [(rand_prose, 220), (rand_mixed, 260), (rand_codepoints, 200), (rand_whitespace, 80),
              (rand_chat, 80), (lambda r: r.choice(CODE) + r.choice(CODE), 30), (rand_long, 6)]
    for maker, count in makers:
        cases += [(maker(rng).encode("utf-8"), True) for _ in range(count)]
    cases += [(rand_invalid_bytes(rng), True) for _ in range(40)]
    # The same chat-like texts with special-token parsing off.
    cases += [(rand_chat(rng).encode("utf-8"), False) for _ in range(30)]
    cases += [(t.encode("utf-8"), False) for t in SPECIALS[:4] + FIXED[-20:-10]]
    return cases


def main():
    parser = argparse.ArgumentParser(description="llama.cpp reference ids for the tokenizer parity test")
    parser.add_argument("--model", required=True, help="GGUF file with the tokenizer")
    parser.add_argument("--out", required=True, help="output file (tokenizer_cases.txt)")
    args = parser.parse_args()

    import llama_cpp  # imported late so --help works without it

    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    cases = build_corpus()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"# llama-cpp-python {llama_cpp.__version__}; model {os.path.basename(args.model)}; "
                f"seed {SEED}; {len(cases)} cases\n")
        f.write("# hex(text)\tids\thex(detokenized, special=True)\tparse_special\n")
        for text, special in cases:
            ids = llm.tokenize(text, add_bos=False, special=special)
            decoded = llm.detokenize(ids, special=True)
            f.write(f"{text.hex()}\t{' '.join(map(str, ids))}\t{decoded.hex()}\t{int(special)}\n")
    os.replace(tmp, args.out)  # a half-written file never looks like a finished one
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
