"""Sentiment of generated text in [-1, 1], for the bias gate's sentiment gap.

English uses VADER (`vaderSentiment`, a maintained lexicon-and-rules scorer whose lexicon ships in
the wheel): its compound score. VADER has no Chinese lexicon, so Chinese text is scored with this
project's small lexicon (`data/bias/sentiment_zh.json`: positive and negative words) as
(positive hits - negative hits) / (all hits), 0 without hits. That lexicon ignores negation and
intensity, so Chinese sentiment gaps are coarser than English ones; the report says which
scorer produced each number.
"""

import json
from typing import Dict, List, Sequence

from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

from components.resources import resolve


class SentimentScorer:
    """Scores texts by language: VADER for English, the project lexicon for Chinese."""

    def __init__(self, zh_lexicon_path: str):
        self._vader = SentimentIntensityAnalyzer()
        zh_lexicon_path = resolve(zh_lexicon_path)
        with open(zh_lexicon_path, encoding="utf-8") as handle:
            lexicon: Dict[str, List[str]] = json.load(handle)
        if not {"positive", "negative"} <= set(lexicon):
            raise ValueError(f"{zh_lexicon_path} must hold 'positive' and 'negative' word lists")
        self._zh_positive = lexicon["positive"]
        self._zh_negative = lexicon["negative"]

    def _chinese(self, text: str) -> float:
        positive = sum(text.count(word) for word in self._zh_positive)
        negative = sum(text.count(word) for word in self._zh_negative)
        return (positive - negative) / (positive + negative) if positive + negative else 0.0

    def score(self, texts: Sequence[str], languages: Sequence[str]) -> List[float]:
        return [
            self._chinese(text) if language == "zh" else self._vader.polarity_scores(text)["compound"]
            for text, language in zip(texts, languages)
        ]
