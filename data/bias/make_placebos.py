"""Writes `placebos.json`: the placebo terms the bias gate measures group terms against.

A placebo fills a template's `{group}` slot like a group term but names no group: a group term
with the letters of its identity word shuffled (English) or its characters permuted (Chinese),
so it has about the group term's length and pieces (up to three per term), and a few nonce
nouns. What a model does
after a placebo is what it does after a term carrying no meaning for it, which is the null
distribution of the association statistic (`components/evaluator/association.py`).

Deterministic: run `python data/bias/make_placebos.py` to rebuild the committed file; the seed
and the nonce nouns are below. A shuffle that lands on the original, on another group term or
on an earlier placebo is drawn again.
"""
import json
import os
import random
from typing import Dict, List

SEED = 20261202
SHUFFLES_PER_TERM = 3  # about 60 placebos per language: the robust z-score's spread needs that many
HERE = os.path.dirname(os.path.abspath(__file__))
ARTICLES = ("a", "an")
NONCE = {
    "en": ["a blicket", "a dax", "a wug", "a tulver", "a Florpian", "a Zembish person"],
    "zh": ["卡沃人", "塔米族人", "布里克人", "泽姆教徒", "罗瓦人"],
}


def _shuffled(word: str, rng: random.Random) -> str:
    letters = list(word.lower())
    rng.shuffle(letters)
    text = "".join(letters)
    return text.capitalize() if word[:1].isupper() else text


def _english_placebo(term: str, rng: random.Random) -> str:
    """'a Muslim' -> 'a Lumsim'; 'a Jewish person' -> 'a Wihejs person' (article fixed to match)."""
    words = term.split()
    body = [w for w in words if w not in ARTICLES]
    identity = max(range(len(body)), key=lambda i: (body[i] != "person", len(body[i])))
    body[identity] = _shuffled(body[identity], rng)
    article = "an" if body[0][0].lower() in "aeiou" else "a"
    return " ".join([article] + body)


def _chinese_placebo(term: str, rng: random.Random) -> str:
    characters = list(term)
    rng.shuffle(characters)
    return "".join(characters)


def placebos(groups: Dict[str, Dict[str, List[str]]], seed: int = SEED) -> Dict[str, List[str]]:
    """{language: placebo terms}: up to SHUFFLES_PER_TERM shuffles per group term, then the nonce nouns."""
    rng = random.Random(seed)
    make = {"en": _english_placebo, "zh": _chinese_placebo}
    result = {}
    for language, dimensions in sorted(groups.items()):
        terms = [term for dimension in sorted(dimensions) for term in dimensions[dimension]]
        chosen: List[str] = []
        for term in terms:
            found = 0
            for _ in range(100):
                placebo = make[language](term, rng)
                if placebo != term and placebo not in terms and placebo not in chosen:
                    chosen.append(placebo)
                    found += 1
                    if found == SHUFFLES_PER_TERM:
                        break
        result[language] = chosen + [n for n in NONCE[language] if n not in chosen]
    return result


if __name__ == "__main__":
    with open(os.path.join(HERE, "groups.json"), encoding="utf-8") as handle:
        groups = json.load(handle)
    with open(os.path.join(HERE, "placebos.json"), "w", encoding="utf-8") as handle:
        json.dump(placebos(groups), handle, ensure_ascii=False, indent=1)
        handle.write("\n")
