"""Reply metrics against a reference, with the established packages, and how two models compare.

- **exact match**: the reply equals the reference after trimming whitespace and case-folding.
- **ROUGE-L** (F-measure, Google's `rouge-score`): its default tokenizer keeps only ASCII letters
  and digits, so Chinese, Japanese or Korean text would score 0 against anything; `ScriptTokenizer`
  splits those scripts into characters and every other script into its words (lower-cased), and
  rouge-score computes the longest common subsequence over those tokens.
- **chrF** (`sacrebleu`, character n-grams; 0-100 in sacrebleu, reported as 0-1 here): needs no
  word segmentation, so it is the same for every script.

`compare` judges a candidate against a baseline on the same sampled conversations: the mean
difference of a metric with a paired bootstrap confidence interval (resampling conversations),
and win / tie / loss counts.
"""

import re
from typing import Dict, List, NamedTuple, Sequence

import numpy as np

METRICS = ("exact_match", "rouge_l", "chrf")
# Scripts written without spaces between words: scored character by character.
_UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u0e00-\u0e7f"
_TOKEN = re.compile(f"[{_UNSPACED}]|[^\\W_{_UNSPACED}]+")


class ScriptTokenizer:
    """rouge-score's tokenizer interface (`tokenize(text) -> tokens`) for every script (module docstring)."""

    def tokenize(self, text: str) -> List[str]:
        return _TOKEN.findall(text.lower())


_SCORERS = {}


def _rouge():
    if "rouge" not in _SCORERS:
        from rouge_score import rouge_scorer

        _SCORERS["rouge"] = rouge_scorer.RougeScorer(["rougeL"], tokenizer=ScriptTokenizer())
    return _SCORERS["rouge"]


def _chrf():
    if "chrf" not in _SCORERS:
        from sacrebleu.metrics import CHRF

        _SCORERS["chrf"] = CHRF()
    return _SCORERS["chrf"]


def score_pair(reply: str, reference: str) -> Dict[str, float]:
    """{exact_match, rouge_l, chrf} of one reply against its reference, each in [0, 1]."""
    exact = float(reply.strip().casefold() == reference.strip().casefold())
    rouge = float(_rouge().score(reference, reply)["rougeL"].fmeasure)
    chrf = float(_chrf().sentence_score(reply, [reference]).score) / 100.0
    return {"exact_match": exact, "rouge_l": rouge, "chrf": chrf}


def score_replies(replies: Sequence[str], references: Sequence[str]) -> Dict[str, np.ndarray]:
    """Each metric's per-reply values."""
    rows = [score_pair(reply, reference) for reply, reference in zip(replies, references)]
    return {metric: np.array([row[metric] for row in rows], float) for metric in METRICS}


class Comparison(NamedTuple):
    """Candidate vs baseline on one metric over the same conversations."""

    metric: str
    candidate_mean: float
    baseline_mean: float
    difference: float  # candidate - baseline
    low: float  # the paired bootstrap confidence interval of the difference
    high: float
    confidence: float
    wins: int
    ties: int
    losses: int

    def to_dict(self) -> dict:
        return self._asdict()


def paired_bootstrap(
    candidate: np.ndarray, baseline: np.ndarray, confidence: float, resamples: int, seed: int
) -> tuple:
    """(low, high): the percentile interval of the mean difference over resampled conversations."""
    differences = np.asarray(candidate, float) - np.asarray(baseline, float)
    if differences.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, differences.size, size=(resamples, differences.size))
    means = differences[draws].mean(axis=1)
    tail = (1.0 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def compare(
    metric: str,
    candidate: np.ndarray,
    baseline: np.ndarray,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    tie_tolerance: float = 1e-9,
) -> Comparison:
    """The candidate's `metric` against the baseline's on the same conversations (module docstring)."""
    candidate, baseline = np.asarray(candidate, float), np.asarray(baseline, float)
    low, high = paired_bootstrap(candidate, baseline, confidence, resamples, seed)
    differences = candidate - baseline
    return Comparison(
        metric,
        float(candidate.mean()) if candidate.size else float("nan"),
        float(baseline.mean()) if baseline.size else float("nan"),
        float(differences.mean()) if differences.size else float("nan"),
        low,
        high,
        confidence,
        int(np.sum(differences > tie_tolerance)),
        int(np.sum(np.abs(differences) <= tie_tolerance)),
        int(np.sum(differences < -tie_tolerance)),
    )
