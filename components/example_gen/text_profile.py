"""Per-document text statistics that the curated schema constrains and TFDV compares across spans.

ExampleGen writes them as features next to the text, so StatisticsGen summarises them like any
other feature and ExampleValidator, the drift check and the skew check see them:

    num_chars            int64   length in Unicode code points
    letter_fraction      float   share of letters (any script) among all characters
    digit_fraction       float   share of decimal digits
    whitespace_fraction  float   share of whitespace
    content_class        bytes   'prose', 'blank', 'symbolic' or 'garbled' (see `content_class`)

The schema bounds `num_chars`, allows only 'prose' in `content_class` up to a small tolerated
share (TFDV's `min_domain_mass`), and puts Jensen-Shannon drift/skew comparators on the
distributions. Counting runs in the regex engine (C), not per character in Python.
"""

import re
from typing import Dict, NamedTuple

_LETTER = re.compile(r"[^\W\d_]")  # \w minus digits and underscore: letters of every script
_DIGIT = re.compile(r"\d")
_WHITESPACE = re.compile(r"\s")
REPLACEMENT_CHARACTER = "\ufffd"

PROSE, BLANK, SYMBOLIC, GARBLED = "prose", "blank", "symbolic", "garbled"
# A document is 'garbled' when at least this share of its characters are U+FFFD (what the
# 'replace' UTF-8 policy leaves behind), and 'symbolic' when letters are under this share of its
# non-whitespace characters (tables, code, number dumps, markup debris).
GARBLED_MIN_REPLACEMENT_SHARE = 0.01
SYMBOLIC_MAX_LETTER_SHARE = 0.5


class TextProfile(NamedTuple):
    """The statistics of one document (see the module docstring)."""

    num_chars: int
    letter_fraction: float
    digit_fraction: float
    whitespace_fraction: float
    content_class: str

    def float_features(self) -> Dict[str, float]:
        return {
            "letter_fraction": self.letter_fraction,
            "digit_fraction": self.digit_fraction,
            "whitespace_fraction": self.whitespace_fraction,
        }


def _count(pattern: "re.Pattern[str]", text: str) -> int:
    return pattern.subn("", text)[1]


def content_class(num_chars: int, letters: int, whitespace: int, replacements: int) -> str:
    """'blank' (nothing but whitespace), 'garbled' (many U+FFFD), 'symbolic' (mostly not letters)
    or 'prose'."""
    visible = num_chars - whitespace
    if visible <= 0:
        return BLANK
    if replacements >= GARBLED_MIN_REPLACEMENT_SHARE * num_chars:
        return GARBLED
    if letters < SYMBOLIC_MAX_LETTER_SHARE * visible:
        return SYMBOLIC
    return PROSE


def profile_text(text: str) -> TextProfile:
    """Measures `text` (an empty text has all fractions 0 and is 'blank')."""
    num_chars = len(text)
    if not num_chars:
        return TextProfile(0, 0.0, 0.0, 0.0, BLANK)
    letters, digits, whitespace = _count(_LETTER, text), _count(_DIGIT, text), _count(_WHITESPACE, text)
    replacements = text.count(REPLACEMENT_CHARACTER)
    return TextProfile(
        num_chars,
        letters / num_chars,
        digits / num_chars,
        whitespace / num_chars,
        content_class(num_chars, letters, whitespace, replacements),
    )
