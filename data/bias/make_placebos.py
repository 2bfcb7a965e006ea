"""Writes `placebos.json`: the placebo terms the bias gate measures group terms against.

A placebo fills a template's `{group}` slot like a group term but names no group: a made-up word
of about the length of a group term's identity word, built from syllables (English: "a
Tovemar", "a Kelidu person") or from characters used to transcribe foreign names (Chinese,
"塔韦诺人"), with the group term's article and "person" / "人" suffix kept. They are made up
rather than shuffled from the group terms: a shuffled name shares letters (and so pieces) with
its group, and a model that ties the group to an ending carries that tie over to its shuffles
(measured: the shuffles of the planted group in `tests/test_bias_e2e.py` leaned like the group).
Characters or syllables of any group term are never used. What a model does after a placebo is
what it does after a term that means nothing to it: the null distribution of the association
statistic (`components/evaluator/probes/association.py`).

Deterministic: run `python data/bias/make_placebos.py` to rebuild the committed file after
changing `groups.json`; the seed is below.
"""

import json
import os
import random
from typing import Dict, List

SEED = 20261202
PER_TERM = 3  # about 60 English and 45 Chinese placebos: the robust z-score's spread needs that many
HERE = os.path.dirname(os.path.abspath(__file__))
ARTICLES = ("a", "an")
ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "gl", "tr")
VOWELS = ("a", "e", "i", "o", "u")
TRANSCRIPTION = "阿巴达伽卡拉玛纳帕萨塔瓦扎贝德格克勒梅内佩雷塞特韦泽比迪基利米皮里蒂维齐博多戈科洛莫诺波罗索托沃佐布杜古库鲁努普苏图乌祖"


def _english_word(length: int, rng: random.Random) -> str:
    word = ""
    while len(word) < length:
        word += rng.choice(ONSETS) + rng.choice(VOWELS)
    return word[: max(length, 3)]


def _english_placebo(term: str, rng: random.Random) -> str:
    """'a Muslim' -> 'a Tovema'; 'a Jewish person' -> 'a Bilure person' (capitalised like the term)."""
    body = [w for w in term.split() if w not in ARTICLES]
    identity = max(range(len(body)), key=lambda i: (body[i] != "person", len(body[i])))
    word = _english_word(len(body[identity]), rng)
    body[identity] = word.capitalize() if body[identity][:1].isupper() else word
    article = "an" if body[0][0].lower() in "aeiou" else "a"
    return " ".join([article] + body)


def _chinese_placebo(term: str, rng: random.Random, alphabet: str) -> str:
    """'穆斯林' -> three transcription characters; '维吾尔族人' -> four and the suffix '人'."""
    suffix = term[-1] if term.endswith("人") else ""
    return "".join(rng.choice(alphabet) for _ in range(len(term) - len(suffix))) + suffix


def placebos(groups: Dict[str, Dict[str, List[str]]], seed: int = SEED) -> Dict[str, List[str]]:
    """{language: placebo terms}: PER_TERM made-up terms shaped like each group term."""
    rng = random.Random(seed)
    result = {}
    for language, dimensions in sorted(groups.items()):
        terms = [term for dimension in sorted(dimensions) for term in dimensions[dimension]]
        alphabet = "".join(c for c in TRANSCRIPTION if not any(c in term for term in terms))
        chosen: List[str] = []
        for term in terms:
            while len(chosen) < (terms.index(term) + 1) * PER_TERM:
                placebo = _english_placebo(term, rng) if language == "en" else _chinese_placebo(term, rng, alphabet)
                words = set(placebo.lower().split())
                if placebo not in chosen and not any(
                    words & set(t.lower().split()) - {"a", "an", "person"} for t in terms
                ):
                    chosen.append(placebo)
        result[language] = chosen
    return result


if __name__ == "__main__":
    with open(os.path.join(HERE, "groups.json"), encoding="utf-8") as handle:
        groups = json.load(handle)
    with open(os.path.join(HERE, "placebos.json"), "w", encoding="utf-8") as handle:
        json.dump(placebos(groups), handle, ensure_ascii=False, indent=1)
        handle.write("\n")
