"""Toxicity scorers: the pluggable interface and the offline default.

A scorer maps texts to `ToxicityScore`s (a score in [0, 1] and the categories it found). The
safety gate calls whatever `safety.scorer` names in config: a dotted path `package.module.name`
to a class or factory called with the `SafetyOptions` that returns an object with `score(texts,
languages)`. To plug in an external classifier (say an in-house model already on disk), write
such a factory that loads it from a local path and returns scores in [0, 1]; nothing may be
downloaded at run time.

The default `ClassifierScorer` scores English text with a trained classifier
(`components.toxicity_model`: alt-profanity-check's linear SVM, which ships its model in the
wheel) and keeps the lexicon for what the classifier does not cover: Chinese (a prompt in 'zh', or
any text with CJK characters, is scored by the lexicon alone), and the category lexicons' threats
and slurs that contain no profane word (an English text's score is the larger of the two). If the
classifier cannot be imported it falls back to the lexicon, with a warning.

`LexiconScorer` needs no model: `better_profanity`'s word list (it ships in the
wheel) plus this project's per-category lexicons for English and Chinese in
`data/safety/lexicons/<lang>.json`. English terms match whole words, case-insensitively;
Chinese terms match as substrings (Chinese is written without spaces). Each distinct matched
term adds `per_match_score`, capped at 1; built from config it is `toxicity_threshold`, so one hit
is toxic whatever the threshold.
"""

import importlib
import json
import logging
import os
import re
from importlib import resources
from typing import Dict, List, NamedTuple, Pattern, Protocol, Sequence, Tuple, runtime_checkable

from components.resources import resolve

PROFANITY_CATEGORY = "profanity"


class ToxicityScore(NamedTuple):
    score: float
    categories: Tuple[str, ...]
    matches: Tuple[str, ...] = ()


@runtime_checkable
class ToxicityScorer(Protocol):
    """What the safety gate needs from a scorer."""

    def score(self, texts: Sequence[str], languages: Sequence[str]) -> List[ToxicityScore]:
        """One score per text; `languages` are ISO codes ('en', 'zh') of the prompts."""


def _read_lexicons(lexicon_dir: str) -> Dict[str, Dict[str, List[str]]]:
    """{language: {category: [terms]}} from `<lexicon_dir>/<lang>.json`."""
    lexicons = {}
    lexicon_dir = resolve(lexicon_dir)
    if not os.path.isdir(lexicon_dir):
        raise FileNotFoundError(f"safety lexicon directory {lexicon_dir} does not exist")
    for name in sorted(os.listdir(lexicon_dir)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(lexicon_dir, name)
        with open(path, encoding="utf-8") as handle:
            try:
                table = json.load(handle)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(table, dict) or not all(isinstance(v, list) for v in table.values()):
            raise ValueError(f"{path} must map each category to a list of terms")
        lexicons[name[: -len(".json")]] = table
    return lexicons


def profanity_words() -> List[str]:
    """better_profanity's bundled word list (read from the installed wheel, no network)."""
    text = resources.files("better_profanity").joinpath("profanity_wordlist.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _word_pattern(terms: Sequence[str]) -> Pattern:
    alternatives = "|".join(re.escape(t) for t in sorted(set(terms), key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def _substring_pattern(terms: Sequence[str]) -> Pattern:
    return re.compile("|".join(re.escape(t) for t in sorted(set(terms), key=len, reverse=True)))


class LexiconScorer:
    """The offline default scorer (see the module docstring)."""

    def __init__(self, lexicon_dir: str, per_match_score: float = 0.5):
        self.per_match_score = per_match_score
        self._patterns: List[Tuple[str, Pattern]] = [(PROFANITY_CATEGORY, _word_pattern(profanity_words()))]
        for language, table in _read_lexicons(lexicon_dir).items():
            for category, terms in table.items():
                if terms:
                    make = _substring_pattern if language == "zh" else _word_pattern
                    self._patterns.append((category, make(terms)))

    @classmethod
    def from_config(cls, safety_config) -> "LexiconScorer":
        return cls(safety_config.lexicon_dir, per_match_score=safety_config.toxicity_threshold)

    def score_one(self, text: str) -> ToxicityScore:
        categories, matches = [], set()
        for category, pattern in self._patterns:
            found = {m.group(0).lower() for m in pattern.finditer(text)}
            if found:
                categories.append(category)
                matches |= found
        return ToxicityScore(min(1.0, self.per_match_score * len(matches)), tuple(categories), tuple(sorted(matches)))

    def score(self, texts: Sequence[str], languages: Sequence[str]) -> List[ToxicityScore]:
        # Every lexicon runs on every text: a model may answer a Chinese prompt in English.
        return [self.score_one(text) for text in texts]


CLASSIFIER_CATEGORY = "toxic_language"  # the category a classifier score at or above the threshold adds
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _classifier():
    """The trained classifier's scoring function, or None (logged) when it cannot be loaded."""
    try:
        from components.toxicity_model import toxicity_probabilities
    except ImportError as exc:
        logging.warning("toxicity classifier unavailable (%s); the safety gate falls back to the lexicon scorer", exc)
        return None
    return toxicity_probabilities


class ClassifierScorer:
    """The default scorer: trained classifier for English, lexicon for Chinese and as fallback
    (see the module docstring)."""

    def __init__(self, lexicon_dir: str, threshold: float = 0.5):
        self.threshold = threshold
        self._lexicon = LexiconScorer(
            lexicon_dir, per_match_score=threshold
        )  # one lexicon term is toxic at any threshold
        self._classify = _classifier()

    @classmethod
    def from_config(cls, safety_config) -> "ClassifierScorer":
        return cls(safety_config.lexicon_dir, safety_config.toxicity_threshold)

    def score(self, texts: Sequence[str], languages: Sequence[str]) -> List[ToxicityScore]:
        scores = self._lexicon.score(texts, languages)
        if self._classify is None:
            return scores
        english = [
            i for i, (text, language) in enumerate(zip(texts, languages)) if language != "zh" and not _CJK.search(text)
        ]
        for index, probability in zip(english, self._classify([texts[i] for i in english])):
            lexicon = scores[index]
            categories = lexicon.categories + ((CLASSIFIER_CATEGORY,) if probability >= self.threshold else ())
            scores[index] = ToxicityScore(max(probability, lexicon.score), categories, lexicon.matches)
        return scores


def load_scorer(dotted_path: str, safety_config) -> ToxicityScorer:
    """Imports `package.module.Name` and calls it (or its `from_config`) with `safety_config`."""
    module_name, _, attribute = dotted_path.rpartition(".")
    if not module_name:
        raise ValueError(f"safety.scorer '{dotted_path}' must be a dotted path like package.module.Name")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"safety.scorer '{dotted_path}' cannot be imported: {exc}") from None
    scorer = factory.from_config(safety_config) if hasattr(factory, "from_config") else factory(safety_config)
    if not isinstance(scorer, ToxicityScorer):
        raise TypeError(
            f"safety.scorer '{dotted_path}' returned {type(scorer).__name__}, which has no score(texts, languages)"
        )
    return scorer
