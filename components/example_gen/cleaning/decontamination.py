"""Decontamination: find training documents that share a long n-gram with an evaluation suite.

Suite texts are cut into lower-cased units (`units.units`: words, or characters for CJK) and
every n-gram is kept as one joined string; a suite text shorter than n (but at least `min_units`)
is one n-gram of its own length. A document is contaminated when any of its n-grams of those
lengths is in the set. The sets are built once at pipeline construction and shipped to the
workers (strings, not Python hashes: those differ between worker processes).
"""

import json
import os
from typing import Dict, FrozenSet, Iterable, Iterator, List, Sequence

import tensorflow as tf

from components.example_gen.cleaning.units import units
from components.example_gen.options import DecontaminationOptions
from components.example_gen.records import CorpusError
from components.resources import resolve

# {n-gram length: the suite's n-grams of that length, units joined by _SEPARATOR}
SuiteGrams = Dict[int, FrozenSet[str]]
_SEPARATOR = " "


def _grams(words: Sequence[str], n: int) -> Iterator[str]:
    return (_SEPARATOR.join(words[i : i + n]) for i in range(len(words) - n + 1))


def _strings(value) -> Iterator[str]:
    """Every string in a JSON value; a {prefix, positive, negative} template (the bias suites)
    also yields its two completed sentences."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        if isinstance(value.get("prefix"), str):
            for ending in ("positive", "negative"):
                if isinstance(value.get(ending), str):
                    yield value["prefix"] + value[ending]
        for item in value.values():
            yield from _strings(item)


def suite_texts(path: str) -> List[str]:
    """The texts of one evaluation file: .jsonl (every string of each record), .json (every
    string), anything else one text per non-blank line. `path` may be a `bundled:` reference."""
    path = resolve(path)
    if not tf.io.gfile.exists(path):
        raise CorpusError(f"decontamination suite {path} does not exist")
    with tf.io.gfile.GFile(path, "rb") as handle:
        try:
            content = handle.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusError(f"decontamination suite {path} is not UTF-8: {exc}") from None
    try:
        if path.endswith(".jsonl"):
            return [text for line in content.splitlines() if line.strip() for text in _strings(json.loads(line))]
        if path.endswith(".json"):
            return list(_strings(json.loads(content)))
    except json.JSONDecodeError as exc:
        raise CorpusError(f"decontamination suite {path} is not valid JSON: {exc}") from None
    return [line.strip() for line in content.splitlines() if line.strip()]


def build_suite_grams(texts: Iterable[str], options: DecontaminationOptions) -> SuiteGrams:
    """The n-grams of the suite texts (see the module docstring)."""
    grams: Dict[int, set] = {}
    for text in texts:
        words = [unit.lower() for unit in units(text)]
        if len(words) < options.min_units:
            continue
        n = min(options.ngram, len(words))
        bucket = grams.setdefault(n, set())
        bucket.update(_grams(words, n))
    return {n: frozenset(found) for n, found in grams.items()}


def load_suites(options: DecontaminationOptions) -> SuiteGrams:
    """The n-grams of every configured suite file."""
    texts = [text for path in options.files for text in suite_texts(os.fspath(path))]
    return build_suite_grams(texts, options)


def is_contaminated(text: str, suite: SuiteGrams) -> bool:
    """True when `text` shares an n-gram (of any length in `suite`) with the suites."""
    if not suite:
        return False
    words = [unit.lower() for unit in units(text)]
    return any(not grams.isdisjoint(_grams(words, n)) for n, grams in suite.items())
