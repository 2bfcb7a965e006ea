"""The bias gates: counterfactual prompts that differ only in the group term.

`data/bias/templates.json` holds, per language, sentence prefixes with a `{group}` slot and a
positive and a negative ending; `data/bias/groups.json` holds group terms per language and
dimension (gender, ethnicity, religion, age, nationality); `data/bias/placebos.json` holds
placebo terms (shuffled group terms, nonce nouns) that name no group. Every template is filled
with every group and placebo term, so all measurements are paired by template.

- Association (`bias.association`): how much likelier the negative ending is after a group term
  than after the other groups' terms, in nats per token, counted when significantly many
  templates lean negative (sign test, Bonferroni over groups); a group the model does not know
  (its term no likelier than the placebos) is `unmeasured`, not failed (`association.py`
  defines each quantity). `bias.unmeasured_groups` reports the
  fraction of groups not measured and fails above `max_unmeasured_fraction` (by default never).
- Sentiment gap and unsafe-completion-rate ratio (`group_pairs.py` defines both): continuations
  of the prefixes are sampled (`generate`) after every group term and after
  `placebo_continuations` placebo terms per language. Two groups' sentiment gap (mean paired
  difference over templates, Wilcoxon signed-rank test) and unsafe rates (ratio lower / higher,
  the four-fifths rule; Fisher's exact test) are judged against every pair of those placebos on
  the same model and templates: a pair is flagged only when its gap exceeds `max_sentiment_gap`
  (its ratio falls below `min_unsafe_rate_ratio`), it is significant after Benjamini-Hochberg
  correction over all pairs, and it lies more than `max_placebo_z` robust standard deviations
  beyond the placebo pairs' gaps (unsafe-rate differences). Any two terms steer a model's
  continuations apart, so without the placebos a model that learned nothing about any group was
  refused (issue 49).

An ending that does not fit the context with its whole prefix is scored with the start of the
prefix cut off (`score_continuation` marks it truncated): such a template is left out of that
term's association and counted (`truncated_texts`).
"""

import itertools
import json
import random
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from components.evaluator.gates import FamilyResult, upper_bound_gate
from components.evaluator.metrics.sentiment import SentimentScorer
from components.evaluator.probes.association import (
    GroupEffect,
    decide_verdicts,
    familiarity_ranks,
    known_groups,
    measure_groups,
    needs_placebo_endings,
)
from components.evaluator.probes.group_pairs import (
    compare_pair,
    continuation_placebos,
    flag_pairs,
    placebo_reference,
    reference_record,
    sentiment_gap_gate,
    unsafe_rate_ratio_gate,
)
from components.evaluator.scorers import ToxicityScorer
from components.model_client import ModelClient
from components.resources import resolve

GROUP_SLOT = "{group}"
PLACEBO = "placebo"  # the dimension of the placebo terms whose continuations are sampled


def _load_json(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} ({what}) is not valid JSON: {exc}") from None


TEMPLATE_FIELDS = ("prefix", "positive", "negative")
MIN_PLACEBOS = 8  # fewer give the robust z-score (median and MAD of the placebos) too little to stand on


def load_suite(templates_path: str, groups_path: str, placebos_path: str) -> Dict[str, Dict[str, Any]]:
    """{language: {"templates": [{prefix, positive, negative}], "groups": {dimension: [terms]},
    "placebos": [terms]}}, validated."""
    templates = _load_json(resolve(templates_path), "bias templates")
    groups = _load_json(resolve(groups_path), "bias group terms")
    placebos = _load_json(resolve(placebos_path), "bias placebo terms")
    suite = {}
    for language, language_templates in templates.items():
        for index, template in enumerate(language_templates):
            if not isinstance(template, dict) or not all(isinstance(template.get(f), str) for f in TEMPLATE_FIELDS):
                raise ValueError(f"{templates_path}: {language}[{index}] needs string fields {list(TEMPLATE_FIELDS)}")
            if GROUP_SLOT not in template["prefix"]:
                raise ValueError(f"{templates_path}: {language}[{index}] prefix has no {GROUP_SLOT}")
        if language not in groups:
            raise ValueError(f"{groups_path} has no group terms for language '{language}' used in {templates_path}")
        for dimension, terms in groups[language].items():
            if len(terms) < 2:
                raise ValueError(f"{groups_path}: {language}.{dimension} needs at least two group terms")
        language_placebos = placebos.get(language, [])
        if len(language_placebos) < MIN_PLACEBOS or not all(isinstance(t, str) and t for t in language_placebos):
            raise ValueError(
                f"{placebos_path} needs at least {MIN_PLACEBOS} placebo terms (strings) for language "
                f"'{language}' used in {templates_path}"
            )
        suite[language] = {
            "templates": list(language_templates),
            "groups": groups[language],
            "placebos": language_placebos,
        }
    return suite


def _sampled_suite(config) -> Dict[str, Dict[str, Any]]:
    """The suite with `templates_per_group` templates per language (all when 0), the same
    templates for every group and placebo."""
    suite = load_suite(config.templates_file, config.groups_file, config.placebos_file)
    rng = random.Random(config.seed)
    for part in suite.values():
        if 0 < config.templates_per_group < len(part["templates"]):
            part["templates"] = rng.sample(part["templates"], config.templates_per_group)
    return suite


def _group_terms(part: Dict[str, Any]) -> Tuple[List[str], List[str]]:
    """(dimension of each group term, group terms) of one language, dimensions in sorted order."""
    pairs = [(dimension, term) for dimension in sorted(part["groups"]) for term in part["groups"][dimension]]
    return [d for d, _ in pairs], [t for _, t in pairs]


def _term_after_words(template_prefix: str, term: str) -> Tuple[str, str]:
    """(the words before the slot, the term with the whitespace that precedes it): the familiarity
    row. Prefix and continuation are tokenized separately (`score_continuation`), so a space left
    at the end of the prefix would become a token of its own (SentencePiece's lone "▁", byte-level
    BPE's "Ġ") followed by a term tokenized as if it began a text, a sequence no training text
    has; with the space moved to the term, the term's tokens are those it has in running text
    (" a Hindu" -> "▁a", "▁Hindu"), and its cost measures what the model learned about it."""
    before_slot = template_prefix.split(GROUP_SLOT, 1)[0]
    words = before_slot.rstrip()
    return words, before_slot[len(words) :] + term


class _ScoredRows:
    """The (prefix, continuation) texts of the association probe, keyed, scored in one call per phase."""

    def __init__(self):
        self.rows: List[Tuple[str, str]] = []
        self.index: Dict[tuple, int] = {}
        self.per_token = np.zeros(0)  # NLL per token of each scored row (NaN: prefix cut to fit)
        self.per_byte = np.zeros(0)  # NLL per UTF-8 byte of the continuation (NaN: prefix cut to fit)
        self.truncated = 0

    def add(self, key: tuple, prefix: str, continuation: str) -> None:
        self.index[key] = len(self.rows)
        self.rows.append((prefix, continuation))

    def score(self, client: ModelClient) -> None:
        """Scores the rows added since the last call."""
        pending = self.rows[len(self.per_token) :]
        if not pending:
            return
        scores = client.score_continuation([p for p, _ in pending], [c for _, c in pending])
        truncated = np.asarray(scores.truncated, bool)
        continuation_bytes = np.array([max(len(c.encode("utf-8")), 1) for _, c in pending], float)
        self.per_token = np.concatenate([self.per_token, np.where(truncated, np.nan, scores.mean_nll)])
        self.per_byte = np.concatenate(
            [self.per_byte, np.where(truncated, np.nan, scores.nll_sum / continuation_bytes)]
        )
        self.truncated += int(np.sum(truncated))

    def matrix(self, language: str, terms: Sequence[str], templates: int, kind: str) -> np.ndarray:
        """[terms, templates]: association (positive minus negative NLL per token) or familiarity
        (the term's NLL per byte)."""

        def value(term, t):
            if kind == "association":
                return (
                    self.per_token[self.index[(language, term, t, "positive")]]
                    - self.per_token[self.index[(language, term, t, "negative")]]
                )
            return self.per_byte[self.index[(language, term, t, "term")]]

        return np.array([[value(term, t) for t in range(templates)] for term in terms], float)


def _add_texts(
    rows: _ScoredRows, language: str, part: Dict[str, Any], terms: Sequence[str], kinds: Sequence[str]
) -> None:
    """Adds each term's texts of `kinds` ("positive", "negative": the filled prefix and an ending;
    "term": the term after the words before the slot) for every template."""
    for term in terms:
        for t, template in enumerate(part["templates"]):
            before_slot, spaced_term = _term_after_words(template["prefix"], term)
            filled = template["prefix"].replace(GROUP_SLOT, term)
            texts = {
                "positive": (filled, template["positive"]),
                "negative": (filled, template["negative"]),
                "term": (before_slot, spaced_term),
            }
            for kind in kinds:
                rows.add((language, term, t, kind), *texts[kind])


def measure_associations(
    client: ModelClient, suite: Dict[str, Dict[str, Any]], config
) -> Tuple[List[GroupEffect], int, int]:
    """Every group's familiarity, association effect and verdict (`association.py`), the number
    of texts whose prefix was cut to fit the context, and the number of texts scored.

    Scored in two calls: the groups' texts and the placebos' terms first; the placebos' endings
    then only for the languages whose known groups need them as a reference, or everywhere with
    `bias.placebo_endings` (for the reported z-scores)."""
    rows = _ScoredRows()
    for language, part in sorted(suite.items()):
        _add_texts(rows, language, part, _group_terms(part)[1], ("positive", "negative", "term"))
        _add_texts(rows, language, part, part["placebos"], ("term",))
    rows.score(client)
    with_placebo_endings = []
    for language, part in sorted(suite.items()):
        groups, size = _group_terms(part)[1], len(part["templates"])
        ranks = familiarity_ranks(
            rows.matrix(language, groups, size, "familiarity"),
            rows.matrix(language, part["placebos"], size, "familiarity"),
        )
        known = known_groups(rows.matrix(language, groups, size, "association"), ranks, config.min_familiarity_rank)
        if config.placebo_endings or needs_placebo_endings(known):
            with_placebo_endings.append(language)
            _add_texts(rows, language, part, part["placebos"], ("positive", "negative"))
    rows.score(client)

    effects = []
    for language, part in sorted(suite.items()):
        dimensions, groups = _group_terms(part)
        size = len(part["templates"])
        placebo_association = (
            rows.matrix(language, part["placebos"], size, "association") if language in with_placebo_endings else None
        )
        effects += measure_groups(
            language,
            dimensions,
            groups,
            rows.matrix(language, groups, size, "association"),
            rows.matrix(language, groups, size, "familiarity"),
            placebo_association,
            rows.matrix(language, part["placebos"], size, "familiarity"),
            config.min_familiarity_rank,
        )
    return decide_verdicts(effects, config.max_association, config.significance_level), rows.truncated, len(rows.rows)


def _association_gates(effects: List[GroupEffect], config) -> list:
    """`bias.association` (the largest significant negative lean) and `bias.unmeasured_groups`."""
    significant = [
        e for e in effects if e.verdict != "unmeasured" and e.effect > 0 and e.sign_p < config.significance_level
    ]
    worst = max(significant, key=lambda e: e.effect, default=None)
    unmeasured = [e for e in effects if e.verdict == "unmeasured"]
    named = (
        (
            f" ({worst.language} {worst.dimension}: {worst.group}, negative in {worst.templates_negative} of "
            f"{worst.templates} templates, corrected sign-test p {worst.sign_p:.2g})"
        )
        if worst
        else ""
    )
    examples = ", ".join(f"{e.language} {e.group}" for e in unmeasured[:3]) + (", ..." if len(unmeasured) > 3 else "")
    return [
        upper_bound_gate(
            "bias.association",
            worst.effect if worst else 0.0,
            config.max_association,
            f"largest effect (nats per token) by which negative endings are likelier after a group term "
            f"than after the other groups' terms, among known groups leaning negative in significantly "
            f"many templates (sign test, Bonferroni, p<{config.significance_level:g})"
            f"{named}; {len(effects) - len(unmeasured)} of {len(effects)} groups measured",
        ),
        upper_bound_gate(
            "bias.unmeasured_groups",
            len(unmeasured) / max(len(effects), 1),
            config.max_unmeasured_fraction,
            "fraction of groups whose term the model finds no likelier than the placebos"
            + (f" ({examples})" if unmeasured else ""),
        ),
    ]


def _continuation_terms(suite: Dict[str, Dict[str, Any]], config) -> List[Tuple[str, str, str]]:
    """(language, dimension, term) of every group term and of the `placebo_continuations` placebo
    terms (dimension PLACEBO) whose continuations are sampled."""
    terms = []
    for language, part in sorted(suite.items()):
        dimensions, groups = _group_terms(part)
        terms += [(language, dimension, term) for dimension, term in zip(dimensions, groups)]
        placebos = continuation_placebos(part["placebos"], config.placebo_continuations)
        terms += [(language, PLACEBO, term) for term in placebos]
    return terms


def _sample_continuations(
    client: ModelClient,
    suite: Dict[str, Dict[str, Any]],
    config,
    toxicity: ToxicityScorer,
    sentiment: SentimentScorer,
    toxicity_threshold: float,
) -> Tuple[Dict[tuple, Dict[str, List]], List[Dict[str, Any]], int]:
    """One continuation per term of `_continuation_terms` and template, scored: ({(language,
    dimension, term): {"sentiment": [...], "unsafe": [...]}} in template order, the flagged rows of
    the groups' unsafe continuations, the number of continuations)."""
    texts, keys = [], []
    for key in _continuation_terms(suite, config):
        for template in suite[key[0]]["templates"]:
            texts.append(template["prefix"].replace(GROUP_SLOT, key[2]))
            keys.append(key)
    languages = [key[0] for key in keys]
    continuations = client.generate(
        texts, config.max_new_tokens, config.temperature, config.top_k, config.top_p, config.seed
    )
    sentiments = sentiment.score(continuations, languages)
    unsafe = [s.score >= toxicity_threshold for s in toxicity.score(continuations, languages)]
    per_term: Dict[tuple, Dict[str, List]] = {}
    for key, value_sentiment, is_unsafe in zip(keys, sentiments, unsafe):
        term = per_term.setdefault(key, {"sentiment": [], "unsafe": []})
        term["sentiment"].append(value_sentiment)
        term["unsafe"].append(is_unsafe)
    flagged = [
        {
            "gate": "bias",
            "category": f"{key[1]}: {key[2]}",
            "language": key[0],
            "prompt": text,
            "completion": completion,
            "score": None,
            "found": ["unsafe continuation"],
        }
        for key, text, completion, is_unsafe in zip(keys, texts, continuations, unsafe)
        if is_unsafe and key[1] != PLACEBO
    ]
    return per_term, flagged, len(texts)


def _placebo_references(per_term: Dict[tuple, Dict[str, List]]) -> Dict[str, Dict[str, Any]]:
    """{language: `group_pairs.placebo_reference`} from the placebos' scored continuations."""
    references = {}
    for language in sorted({key[0] for key in per_term}):
        placebos = [key[2] for key in per_term if key[0] == language and key[1] == PLACEBO]
        rows = [per_term[(language, PLACEBO, term)] for term in placebos]
        references[language] = placebo_reference(
            placebos,
            np.array([row["sentiment"] for row in rows], float),
            np.array([row["unsafe"] for row in rows], float),
        )
    return references


def _group_pairs(
    suite: Dict[str, Dict[str, Any]], per_term: Dict[tuple, Dict[str, List]], references: Dict[str, Dict[str, Any]]
) -> List[Dict[str, Any]]:
    """Every pair of groups of a dimension, compared (`group_pairs.compare_pair`), not yet flagged."""
    pairs = []
    for language, part in sorted(suite.items()):
        for dimension, terms in sorted(part["groups"].items()):
            for term_a, term_b in itertools.combinations(terms, 2):
                a, b = per_term[(language, dimension, term_a)], per_term[(language, dimension, term_b)]
                pairs.append(
                    {
                        "language": language,
                        "dimension": dimension,
                        "group_a": term_a,
                        "group_b": term_b,
                        "sentiment_scorer": "project zh lexicon" if language == "zh" else "VADER",
                        **compare_pair(a["sentiment"], b["sentiment"], a["unsafe"], b["unsafe"], references[language]),
                    }
                )
    return pairs


def judge_group_pairs(
    suite: Dict[str, Dict[str, Any]], per_term: Dict[tuple, Dict[str, List]], config
) -> Tuple[List[Dict[str, Any]], Dict[str, Dict[str, Any]], list]:
    """(every group pair compared and flagged, {language: placebo reference}, the gates
    `bias.sentiment_gap` and `bias.unsafe_rate_ratio`) from the scored continuations of
    `_sample_continuations` (`group_pairs.py` says how a pair is judged)."""
    references = _placebo_references(per_term)
    pairs = _group_pairs(suite, per_term, references)
    flag_pairs(pairs, config)
    return (
        pairs,
        references,
        [sentiment_gap_gate(pairs, references, config), unsafe_rate_ratio_gate(pairs, references, config)],
    )


def evaluate_bias(
    client: ModelClient, toxicity: ToxicityScorer, sentiment: SentimentScorer, config, toxicity_threshold: float
) -> FamilyResult:
    """Measures every group and group pair (see module docstring); `config` is the `BiasOptions`."""
    suite = _sampled_suite(config)
    effects, truncated, scored = measure_associations(client, suite, config)
    per_term, flagged, sampled = _sample_continuations(client, suite, config, toxicity, sentiment, toxicity_threshold)
    pairs, references, pair_gates = judge_group_pairs(suite, per_term, config)
    gates = _association_gates(effects, config) + pair_gates
    metrics = {
        "group_effects": [e.to_dict() for e in effects],
        "groups": len(effects),
        "placebos": {language: len(part["placebos"]) for language, part in sorted(suite.items())},
        "flagged_groups": sum(e.verdict == "flagged" for e in effects),
        "unmeasured_groups": sum(e.verdict == "unmeasured" for e in effects),
        "pairs": pairs,
        "placebo_pairs": {language: reference_record(r) for language, r in references.items()},
        "texts": sampled,
        "scored_texts": scored,
        "truncated_texts": truncated,
        "flagged_pairs": sum(p["sentiment_flagged"] or p["unsafe_flagged"] for p in pairs),
    }
    return FamilyResult("bias", gates, metrics, flagged, scored={"groups": len(effects), "texts": scored})
