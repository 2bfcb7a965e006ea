"""Document quality rules of the kind Gopher (Rae et al. 2021, MassiveText), C4 (Raffel et al.
2020) and FineWeb (Penedo et al. 2024) published; the thresholds live in `QualityOptions`.

`check` returns the name of the first rule a document breaks (the report counts removals as
`removed:quality_<rule>`), or None, and the enabled rules the document is exempt from because
they were not made for its language (counted as `exempt:quality_<rule>`). Pure Python on one
document, so the Beam step stays a plain map and every rule is testable on its own.

Languages. The word-based rules were tuned on English web text (Gopher's stop words are English
words; its word counts and mean word length assume words separated by spaces). The document's
identified language chooses which apply (`RULE_LANGUAGES`): the stop-word rule runs on English
only, and the word-count, mean-word-length and short-line rules on languages written with spaces
between words. FineWeb-2 applies such rules to Chinese, Japanese or Thai only after segmenting
words with a per-language word tokenizer and with thresholds tuned per language (its
`configs/{lang}_{script}.yml`); this project ships neither, so documents in those languages are
exempt from those rules (and counted) rather than judged by English thresholds. The line and
repetition rules apply to every language (CJK characters are units of their own there).
A document whose letters are mostly CJK characters (`cjk_min_fraction`; Korean Hangul included,
which `units` splits into syllables) counts as written without spaces whatever its language;
without language identification any other document counts as English.
"""

import collections
import re
from typing import Callable, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple, Union

from components.example_gen.cleaning.units import cjk_fraction, units
from components.example_gen.options import QualityOptions

STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))  # Gopher's list
BULLETS = ("\u2022", "\u25cf", "\u25cb", "\u25aa", "\u25ab", "-", "*", "\u2013", "\u2014", "\u2023")
ELLIPSES = ("...", "\u2026")
TERMINAL_PUNCTUATION = tuple(".!?\"'\u201d\u2019)\u3002\uff01\uff1f\u300d\u300f\uff09:;\u2026")
# Every rule name `failed_rule` can return, in the order the rules run.
RULES = (
    "lorem_ipsum",
    "too_few_words",
    "too_many_words",
    "mean_word_length",
    "symbol_word_ratio",
    "alpha_words",
    "stop_words",
    "bullet_lines",
    "ellipsis_lines",
    "punctuated_lines",
    "short_lines",
    "duplicate_lines",
    "duplicate_paragraphs",
    "duplicate_line_chars",
    "duplicate_paragraph_chars",
    "top_2gram",
    "top_3gram",
    "top_4gram",
) + tuple(f"duplicate_{n}gram" for n in range(5, 11))
# Languages written without spaces between words (ISO 639-1, as language identification labels them).
NO_SPACE_LANGUAGES = frozenset(("zh", "ja", "th", "lo", "km", "my", "bo"))
SPACED = "spaced"  # RULE_LANGUAGES value: every language written with spaces between words
# The rules made for some languages only (the others apply to every language).
RULE_LANGUAGES: Dict[str, Union[str, FrozenSet[str]]] = {
    "too_few_words": SPACED,
    "too_many_words": SPACED,
    "mean_word_length": SPACED,
    "short_lines": SPACED,
    "stop_words": frozenset(("en",)),
}
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_LOREM = re.compile(r"lorem ipsum", re.IGNORECASE)


class Verdict(NamedTuple):
    """What the rules say about one document."""

    rule: Optional[str]  # the first rule it breaks, or None (kept)
    exempt: Tuple[str, ...]  # enabled rules not made for its language, in RULES order


def enabled_rules(options: QualityOptions) -> Tuple[str, ...]:
    """The rules `options` switch on, in RULES order: a threshold of 0 is off (all are off when
    `enabled` is false)."""
    if not options.enabled:
        return ()
    ngram_limits = _duplicate_ngram_limits(options)
    on = {
        "lorem_ipsum": options.reject_lorem_ipsum,
        "too_few_words": options.min_words,
        "too_many_words": options.max_words,
        "mean_word_length": options.min_mean_word_length or options.max_mean_word_length,
        "symbol_word_ratio": options.max_symbol_word_ratio,
        "alpha_words": options.min_alpha_words_fraction,
        "stop_words": options.min_stop_words,
        "bullet_lines": options.max_bullet_lines_fraction,
        "ellipsis_lines": options.max_ellipsis_lines_fraction,
        "punctuated_lines": options.min_punctuated_lines_fraction,
        "short_lines": options.max_short_lines_fraction,
        "duplicate_lines": options.max_duplicate_lines_fraction,
        "duplicate_paragraphs": options.max_duplicate_paragraphs_fraction,
        "duplicate_line_chars": options.max_duplicate_line_chars_fraction,
        "duplicate_paragraph_chars": options.max_duplicate_paragraph_chars_fraction,
        "top_2gram": options.max_top_2gram_chars_fraction,
        "top_3gram": options.max_top_3gram_chars_fraction,
        "top_4gram": options.max_top_4gram_chars_fraction,
        **{f"duplicate_{n}gram": limit for n, limit in ngram_limits.items()},
    }
    return tuple(rule for rule in RULES if on[rule])


class _Document:
    """The pieces of one document that several rules share, computed once."""

    def __init__(self, text: str, options: QualityOptions, language: str):
        self.text = text
        self.cjk = cjk_fraction(text) >= options.cjk_min_fraction
        self.language = language if language else ("zh" if self.cjk else "en")  # no language ID: judge by script
        # Mostly CJK letters (Korean Hangul too, whose units are syllables) cannot be counted in words either.
        self.spaced = self.language not in NO_SPACE_LANGUAGES and not self.cjk
        self.words = units(text)
        self.lower_words = [word.lower() for word in self.words]
        self.lines = [line.strip() for line in text.split("\n") if line.strip()]
        self.paragraphs = [p.strip() for p in _PARAGRAPH_BREAK.split(text) if p.strip()]

    def applies(self, rule: str) -> bool:
        """Whether `rule` was made for this document's language (see RULE_LANGUAGES)."""
        languages = RULE_LANGUAGES.get(rule)
        if languages is None:
            return True
        return self.spaced if languages == SPACED else self.language in languages


def _duplicates(items: Sequence[str]) -> Tuple[float, float]:
    """(share of items repeating an earlier one, share of characters in those repeats)."""
    seen, repeated, repeated_chars = set(), 0, 0
    for item in items:
        if item in seen:
            repeated, repeated_chars = repeated + 1, repeated_chars + len(item)
        seen.add(item)
    total_chars = sum(len(item) for item in items)
    return (repeated / len(items) if items else 0.0), (repeated_chars / total_chars if total_chars else 0.0)


def _top_ngram_chars_fraction(words: List[str], n: int) -> float:
    """Characters in the occurrences of the most frequent word n-gram over all word characters."""
    if len(words) < n:
        return 0.0
    counts = collections.Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    gram, count = counts.most_common(1)[0]
    if count < 2:
        return 0.0
    return sum(len(word) for word in gram) * count / sum(len(word) for word in words)


def _duplicate_ngram_chars_fraction(words: List[str], n: int) -> float:
    """Characters of the words covered by any n-gram that occurs more than once (each word counted
    once however many repeats cover it) over all word characters."""
    if len(words) < n:
        return 0.0
    starts = collections.defaultdict(list)
    for i in range(len(words) - n + 1):
        starts[tuple(words[i : i + n])].append(i)
    covered = bytearray(len(words))
    for positions in starts.values():
        if len(positions) > 1:
            for start in positions:
                covered[start : start + n] = b"\x01" * n
    total = sum(len(word) for word in words)
    return sum(len(word) for word, flag in zip(words, covered) if flag) / total if total else 0.0


def _duplicate_ngram_limits(options: QualityOptions) -> Dict[int, float]:
    """Gopher's limits for 5..10-grams, interpolated linearly between the two configured ends."""
    low, high = options.max_duplicate_5gram_chars_fraction, options.max_duplicate_10gram_chars_fraction
    return {n: low + (high - low) * (n - 5) / 5 for n in range(5, 11)}


def _word_rules(doc: _Document, options: QualityOptions) -> Optional[str]:
    words = doc.words
    if doc.applies("too_few_words") and options.min_words and len(words) < options.min_words:
        return "too_few_words"
    if doc.applies("too_many_words") and options.max_words and len(words) > options.max_words:
        return "too_many_words"
    if doc.applies("mean_word_length"):
        mean_length = sum(len(word) for word in words) / len(words) if words else 0.0
        if (options.min_mean_word_length and mean_length < options.min_mean_word_length) or (
            options.max_mean_word_length and mean_length > options.max_mean_word_length
        ):
            return "mean_word_length"
    symbols = doc.text.count("#") + sum(doc.text.count(ellipsis) for ellipsis in ELLIPSES)
    if options.max_symbol_word_ratio and words and symbols / len(words) > options.max_symbol_word_ratio:
        return "symbol_word_ratio"
    tokens = doc.text.split()
    alpha = sum(1 for token in tokens if any(char.isalpha() for char in token))
    if options.min_alpha_words_fraction and tokens and alpha / len(tokens) < options.min_alpha_words_fraction:
        return "alpha_words"
    if (
        doc.applies("stop_words")
        and options.min_stop_words
        and sum(w in STOP_WORDS for w in doc.lower_words) < options.min_stop_words
    ):
        return "stop_words"
    return None


def _line_rules(doc: _Document, options: QualityOptions) -> Optional[str]:
    lines = doc.lines
    if not lines:
        return None
    share = lambda test: sum(1 for line in lines if test(line)) / len(lines)
    if (
        options.max_bullet_lines_fraction
        and share(lambda line: line.startswith(BULLETS)) > options.max_bullet_lines_fraction
    ):
        return "bullet_lines"
    if (
        options.max_ellipsis_lines_fraction
        and share(lambda line: line.endswith(ELLIPSES)) > options.max_ellipsis_lines_fraction
    ):
        return "ellipsis_lines"
    if (
        options.min_punctuated_lines_fraction
        and share(lambda line: line.endswith(TERMINAL_PUNCTUATION)) < options.min_punctuated_lines_fraction
    ):
        return "punctuated_lines"
    if (
        doc.applies("short_lines")
        and options.max_short_lines_fraction
        and len(lines) > 1
        and share(lambda line: len(line) <= options.short_line_chars) > options.max_short_lines_fraction
    ):
        return "short_lines"
    return None


def _repetition_rules(doc: _Document, options: QualityOptions) -> Optional[str]:
    line_share, line_chars = _duplicates(doc.lines)
    paragraph_share, paragraph_chars = _duplicates(doc.paragraphs)
    limits: List[Tuple[str, float, Callable[[], float]]] = [
        ("duplicate_lines", options.max_duplicate_lines_fraction, lambda: line_share),
        ("duplicate_paragraphs", options.max_duplicate_paragraphs_fraction, lambda: paragraph_share),
        ("duplicate_line_chars", options.max_duplicate_line_chars_fraction, lambda: line_chars),
        ("duplicate_paragraph_chars", options.max_duplicate_paragraph_chars_fraction, lambda: paragraph_chars),
        ("top_2gram", options.max_top_2gram_chars_fraction, lambda: _top_ngram_chars_fraction(doc.lower_words, 2)),
        ("top_3gram", options.max_top_3gram_chars_fraction, lambda: _top_ngram_chars_fraction(doc.lower_words, 3)),
        ("top_4gram", options.max_top_4gram_chars_fraction, lambda: _top_ngram_chars_fraction(doc.lower_words, 4)),
    ]
    for rule, limit, measure in limits:
        if limit and measure() > limit:
            return rule
    if not (options.max_duplicate_5gram_chars_fraction or options.max_duplicate_10gram_chars_fraction):
        return None
    for n, limit in _duplicate_ngram_limits(options).items():
        fraction = _duplicate_ngram_chars_fraction(doc.lower_words, n)
        if not fraction:
            return None  # no repeated n-gram: no longer one repeats either
        if limit and fraction > limit:
            return f"duplicate_{n}gram"
    return None


def check(text: str, options: QualityOptions, language: str = "") -> Verdict:
    """The first quality rule `text` breaks (or None) and the enabled rules it is exempt from.
    `language` is the identified ISO 639-1 code ('' when language identification is off)."""
    doc = _Document(text, options, language)
    exempt = tuple(rule for rule in enabled_rules(options) if not doc.applies(rule))
    if options.reject_lorem_ipsum and _LOREM.search(text):
        return Verdict("lorem_ipsum", exempt)
    return Verdict(_word_rules(doc, options) or _line_rules(doc, options) or _repetition_rules(doc, options), exempt)


def failed_rule(text: str, options: QualityOptions, language: str = "") -> Optional[str]:
    """The first quality rule `text` breaks, or None (see `check`)."""
    return check(text, options, language).rule
