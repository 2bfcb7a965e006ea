"""The byte-level conventions of GPT-2-style BPE tokenizers, as plain data.

Byte-level BPE vocabularies spell every byte as one printable character so that tokens are
ordinary strings: bytes that are printable Latin-1 characters stand for themselves, the other 68
(controls, space, DEL, NBSP, soft hyphen) are numbered upwards from U+0100 in byte order. So the
space byte is 'Ġ' (U+0120) and newline 'Ċ' (U+010A).

The pre-tokenizer splits text into words before BPE with GPT-2's regular expression

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

where `\\s` is Unicode White_Space (checked against `tokenizers` on every code point), or Llama 3's
(LLAMA3_PATTERN). RE2 has no lookahead; `bpe_graph.py` reproduces the alternatives that need it
by splitting whitespace runs itself.
"""

from typing import Dict, List

# Unicode White_Space, which is what `\s` matches in the `tokenizers` regex engine (Oniguruma).
WHITESPACE_CLASS = (
    "\\t\\n\\x0B\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
)
WHITESPACE_RUN = f"[{WHITESPACE_CLASS}]+"
# GPT-2's alternatives for text without whitespace (save one leading space), then a whole
# whitespace run: applied to pieces that `bpe_graph` has already cut at whitespace, it gives
# exactly the words GPT-2's expression gives.
GPT2_WORD = f"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{{L}}+| ?\\p{{N}}+| ?[^{WHITESPACE_CLASS}\\p{{L}}\\p{{N}}]+|{WHITESPACE_RUN}"
# A `Digits` pre-tokenizer before the ByteLevel one isolates each digit (individual_digits) or each
# run of digits; `tokenizers` counts as a digit what Rust's char::is_numeric does: categories Nd, Nl, No.
DIGIT, DIGITS = "\\p{N}", "\\p{N}+"
# Llama 3's expression (as its tokenizer.json writes it), and the same with its two lookahead
# alternatives replaced by a whole whitespace run: `bpe_graph` applies that to pieces in which a
# whitespace run is never followed by text (see `bpe_graph._llama3_items`).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_WORD = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    f"| ?[^{WHITESPACE_CLASS}\\p{{L}}\\p{{N}}]+[\\r\\n]*|[{WHITESPACE_CLASS}]*[\\r\\n]+|{WHITESPACE_RUN}"
)
# The pattern as `tokenizers` writes it in a tokenizer.json (Split pre-tokenizers carry it).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def byte_to_char() -> List[str]:
    """The character that stands for each byte value 0..255."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    chars, extra = [], 0
    for value in range(256):
        if value in printable:
            chars.append(chr(value))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def char_to_byte() -> Dict[str, int]:
    """The inverse of `byte_to_char`."""
    return {char: value for value, char in enumerate(byte_to_char())}
