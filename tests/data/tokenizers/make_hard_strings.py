"""Reference ids for tests/it/tokenizer_vocabs.rs: the default model's (SmolLM2-135M-Instruct)
Hugging Face tokenizer on a corpus of hard strings, written to smollm2-hard-strings.json.

The tokenizer is SmolLM2's published tokenizer.json rebuilt from the GGUF's own vocabulary and
merges: BPE under Sequence[Digits(individual_digits), ByteLevel(use_regex)] with the vocabulary's
control tokens as special added tokens (normalized: false), as that file declares them. The ids
come from the Hugging Face `tokenizers` library (pip install tokenizers==0.22.2).

Usage: python make_hard_strings.py MODEL.gguf > smollm2-hard-strings.json
"""

import json
import struct
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CORPUS = [
    # unicode
    "naïve café, façade, Ångström, ß, İstanbul",
    "日本語のテキストと中文字符，还有한국어。",
    "مرحبا بالعالم",
    "e\u0301 vs é (combining acute), Z\u0351\u0352a\u0327l\u0300g\u030co",
    "zero\u200bwidth\u200djoiner and\u00a0nbsp",
    "Ελληνικά και Кириллица",
    # digit runs
    "1234567890 12345678901234567890",
    "3.14159265358979, 1,000,000.00, -42, +7e-10",
    "0x1F 0b1010 007 2024-12-03T05:31:01Z",
    # whitespace runs
    "",
    " ",
    "  ",
    "   leading and trailing   ",
    "\t\ttabs\t",
    "\n",
    "\n\n\n",
    "line one\r\nline two\n\n  indented\n",
    " \n \n ",
    "a          b",
    # code
    "def f(x):\n    return {'a': [x ** 2 for x in range(10)]}\n",
    "fn main() {\n\tprintln!(\"{}\", 1 + 2); // ok\n}\n",
    "if (a != b && c >= d) { x <<= 3; y->z = *p++; }",
    "<div class=\"x\">&amp;</div>\n<!-- comment -->",
    "SELECT * FROM t WHERE id = 1;  -- trailing",
    "    # four-space indent\n        # eight\n",
    # emoji
    "👍🏽 👨‍👩‍👧 🇫🇷 ❤️ 🙂🙂🙂",
    "emoji in text: I ❤️ 🦀 and 🐍!",
    # contractions and case
    "don't I'LL we've she'd they're IT'S",
    "HELLO World hElLo",
    # special tokens in text
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|im_end|><|im_end|>more",
    "<|im_start partial <|im_end| and <|unknown|>",
    "<file_sep><filename>main.py\n<jupyter_code>print(1)",
    " <|im_start|> spaced <|im_end|> ",
]


def read_gguf_metadata(path):
    """The metadata of a GGUF file (v2/v3), without numpy."""
    with open(path, "rb") as f:

        def unpack(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def string():
            return f.read(unpack("Q")).decode("utf-8")

        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

        def value(kind):
            if kind in scalar:
                return unpack(scalar[kind])
            if kind == 8:
                return string()
            if kind == 9:
                inner, count = unpack("I"), unpack("Q")
                return [value(inner) for _ in range(count)]
            raise ValueError(f"unknown GGUF value type {kind}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        unpack("I")  # version
        unpack("Q")  # tensor count
        metadata = {}
        for _ in range(unpack("Q")):
            key = string()
            metadata[key] = value(unpack("I"))
        return metadata


def smollm2_tokenizer(metadata):
    tokens = metadata["tokenizer.ggml.tokens"]
    types = metadata["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    control = [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3]
    tokenizer.add_special_tokens(control)
    return tokenizer


def main():
    metadata = read_gguf_metadata(sys.argv[1])
    assert metadata["tokenizer.ggml.pre"] == "smollm", metadata["tokenizer.ggml.pre"]
    tokenizer = smollm2_tokenizer(metadata)
    cases = [{"text": text, "ids": tokenizer.encode(text, add_special_tokens=False).ids} for text in CORPUS]
    # One case a line, so a diff shows which string changed.
    lines = ",\n".join("  " + json.dumps(case, ensure_ascii=False) for case in cases)
    sys.stdout.write(f'{{"model": "SmolLM2-135M-Instruct", "tokenizers": "0.22.2", "cases": [\n{lines}\n]}}\n')


if __name__ == "__main__":
    main()
