"""Synthetic corpora for the bias gate's end-to-end test, built from the project's own bias suite.

Every sentence is a template prefix of `data/bias/templates.json` with one group term of
`data/bias/groups.json` in its slot, followed by that template's positive or negative ending.
Per template the target group occurs as often as all other groups together (each other group
twice), in both corpora, which differ only in how endings are paired with groups:

- associated: the target group always gets the negative ending, every other group the
  positive one, so the group term alone decides the ending;
- unassociated: every group gets the positive and the negative ending equally often.

Both corpora hold the same prefixes and the same endings the same number of times; only the
association between group and ending is removed. The target group is over-represented in both:
the bias gate's association statistic, NLL(positive) - NLL(negative) per template, cancels the
group term's own likelihood, so frequency alone must not be flagged.

Templates whose ending the project's safety scorer calls unsafe are left out (of the suite the
test evaluates and of the corpora): the test is about association, and with about a dozen
continuations per group the four-fifths rule would flag a single unsafe continuation in one
group of an unassociated model.

Sentences are shuffled into multi-sentence documents so that ExampleGen's exact and
near-duplicate removal keeps them.
"""

import json
import os
import random
from typing import Dict, List, Tuple

from components.evaluator.options import BiasOptions, SafetyOptions
from components.resources import resolve

OTHER_GROUP_COPIES = 2  # sentences per template and non-target group
CORPUS_REPEATS = 2  # how often the whole set of suite sentences is written

LANGUAGE, DIMENSION, TARGET_GROUP = "en", "religion", "a Buddhist"
# The planted-association run (tests/test_bias_e2e.py, benchmarks/gate_calibration.py), on top of
# tests/conftest.py's FAST_OVERRIDES. The corpora are built from the bias templates on purpose, so
# decontamination (which would remove them as eval contamination) and the quality rules (repeated
# template sentences) are off; the lexicon scorer is pinned because the test's numbers were measured
# with it. Pieces stop at spaces (`tokenizer.pieces_cross_words=false`): on a corpus made of a few
# template sentences, pieces that cross words swallow whole "group term + ending" spans, and the
# planted association is then not a dependence between separate tokens. Training is pinned to
# float32 in graph mode (`training.jit_compile=off`): TensorFlow's own kernels are compiled for one
# instruction set, and oneDNN's, which differ between the CPUs these machines have, can be capped
# at AVX2 (benchmarks/gate_calibration.py --isa avx2), so one machine measures both kinds; XLA's CPU
# code generator targets the host and has no such cap in TF 2.16. Model selection is off: the run is
# about the gate on a model that learned the association, not about the Trainer.
#
# Why the unassociated model sits far from the gate: until this round the Trainer packed the
# corpus into the same blocks every epoch, so on these 1,000 short sentences the model learned
# which sentence follows which, and the ending it expects after a group term at the start of a
# text was an accident of that packing: the most negative-leaning group of the unassociated model
# reached +0.154 nats per token, 22 of 31 templates, on an AVX-512 machine (issue 36). Documents
# are now shuffled before packing every epoch (components/trainer/training/data.py), and the
# familiarity probe no longer scores a lone space token (components/evaluator/probes/bias.py): over 3
# seeds and both instruction sets, the most negative-leaning unassociated group stays at +0.012
# nats per token or less (threshold 0.25), corrected p >= 0.7, every group measured, and the planted
# target is +2.9 to +3.7 (30-31 of 31 templates, corrected p <= 7.5e-08) at 1,000 steps (2,000
# were needed before). Every template of the suite is
# evaluated (FAST_OVERRIDES samples a few).
PLANTED_OVERRIDES = (
    "training.train_steps=1000",
    "training.learning_rate=0.01",
    "training.jit_compile=off",
    "training.early_stopping_patience=0",
    "training.keep_best_eval=false",
    "evaluator.bias.max_new_tokens=8",
    "cleaning.decontamination.enabled=false",
    "cleaning.quality.enabled=false",
    "evaluator.safety.scorer=components.evaluator.scorers.LexiconScorer",
    "tokenizer.pieces_cross_words=false",
    "training.precision=float32",
    "evaluator.bias.templates_per_group=0",
)


def planted_run_recipe(directory: str, associated: bool) -> Tuple[str, List[str]]:
    """(data root, config overrides) of the planted-association run (`associated`) or of the same
    corpus without the association, written under `directory`: the corpus, the single-dimension
    suite the Evaluator runs, and the settings on top of tests/conftest.py's FAST_OVERRIDES. The
    end-to-end test and benchmarks/gate_calibration.py run exactly this."""
    from tests.conftest import FAST_OVERRIDES

    suite = write_single_dimension_suite(os.path.join(directory, "suite"), LANGUAGE, DIMENSION)
    corpus = write_group_association_corpus(
        os.path.join(directory, "corpus"), LANGUAGE, DIMENSION, TARGET_GROUP, associated, repeats=CORPUS_REPEATS
    )
    return corpus, [
        *FAST_OVERRIDES,
        *PLANTED_OVERRIDES,
        *(f"evaluator.bias.{key}={path}" for key, path in suite.items()),
    ]


# The noise model (issue 49): short training on a small corpus that names no group, every other
# setting at its default but 12 bias templates per language. Before the sentiment and unsafe-rate
# gates were judged against placebo pairs, such a model was refused by `bias.sentiment_gap` (a Black
# person vs a Hispanic person, 0.43 > 0.3): any two terms steer a barely trained model's
# continuations apart. The quality gates are relaxed (tests/conftest.py WEAK_MODEL_QUALITY): the
# run is about the bias gates on a model that learned nothing about any group.
NOISE_CORPUS_BYTES = 200_000
NOISE_OVERRIDES = ("training.train_steps=60", "evaluator.bias.templates_per_group=12")


def noise_run_recipe(directory: str) -> Tuple[str, List[str]]:
    """(data root, config overrides) of the noise model's run: the first NOISE_CORPUS_BYTES of the
    bundled support replies (no group term occurs in them) written under `directory`, with
    FAST_OVERRIDES, WEAK_MODEL_QUALITY and NOISE_OVERRIDES."""
    from tests.conftest import FAST_OVERRIDES, WEAK_MODEL_QUALITY, write_tiny_corpus

    corpus = write_tiny_corpus(os.path.join(directory, "corpus"), max_bytes=NOISE_CORPUS_BYTES)
    return corpus, [*FAST_OVERRIDES, *WEAK_MODEL_QUALITY, *NOISE_OVERRIDES]


def _safe_templates(templates: List[dict]) -> List[dict]:
    """The templates whose endings the lexicon safety scorer does not flag (the scorer the bias
    end-to-end test pins: its numbers were measured with it)."""
    from components.evaluator.scorers import LexiconScorer

    safety = SafetyOptions()
    scorer = LexiconScorer.from_config(safety)
    endings = [t[kind] for t in templates for kind in ("positive", "negative")]
    scores = scorer.score(endings, ["en"] * len(endings))
    unsafe = {ending for ending, score in zip(endings, scores) if score.score >= safety.toxicity_threshold}
    return [t for t in templates if t["positive"] not in unsafe and t["negative"] not in unsafe]


def load_single_dimension_suite(language: str, dimension: str) -> Tuple[List[dict], List[str]]:
    """(safe templates, group terms) of one language and dimension of the bundled suite."""
    defaults = BiasOptions()
    with open(resolve(defaults.templates_file), encoding="utf-8") as handle:
        templates = json.load(handle)[language]
    with open(resolve(defaults.groups_file), encoding="utf-8") as handle:
        terms = json.load(handle)[language][dimension]
    return _safe_templates(templates), terms


def write_single_dimension_suite(directory: str, language: str, dimension: str) -> Dict[str, str]:
    """Writes the bundled suite restricted to one language and dimension (safe templates only);
    returns the `evaluator.bias` settings (templates_file, groups_file) that point at it."""
    templates, terms = load_single_dimension_suite(language, dimension)
    os.makedirs(directory, exist_ok=True)
    paths = {
        "templates_file": os.path.join(directory, "templates.json"),
        "groups_file": os.path.join(directory, "groups.json"),
    }
    with open(paths["templates_file"], "w", encoding="utf-8") as handle:
        json.dump({language: templates}, handle, ensure_ascii=False)
    with open(paths["groups_file"], "w", encoding="utf-8") as handle:
        json.dump({language: {dimension: terms}}, handle, ensure_ascii=False)
    return paths


def _endings(term: str, target: str, copies: int, associated: bool) -> List[str]:
    if not associated:
        return ["positive", "negative"] * (copies // 2)
    return ["negative" if term == target else "positive"] * copies


def group_sentences(templates: List[dict], terms: List[str], target: str, associated: bool) -> List[str]:
    """Every template with every group term, as often and with the endings the module docstring says."""
    if target not in terms:
        raise ValueError(f"target group {target!r} is not one of the suite's terms {terms}")
    target_copies = OTHER_GROUP_COPIES * (len(terms) - 1)
    return [
        template["prefix"].replace("{group}", term) + template[ending]
        for template in templates
        for term in terms
        for ending in _endings(term, target, target_copies if term == target else OTHER_GROUP_COPIES, associated)
    ]


def write_group_association_corpus(
    directory: str,
    language: str,
    dimension: str,
    target: str,
    associated: bool,
    repeats: int,
    sentences_per_document: int = 4,
    seed: int = 0,
) -> str:
    """Writes `corpus.jsonl`: the suite sentences `repeats` times, shuffled into documents."""
    templates, terms = load_single_dimension_suite(language, dimension)
    sentences = group_sentences(templates, terms, target, associated) * repeats
    random.Random(seed).shuffle(sentences)
    return write_sentence_documents(directory, sentences, sentences_per_document)


def write_sentence_documents(directory: str, sentences: List[str], sentences_per_document: int) -> str:
    """Writes `corpus.jsonl` under `directory`: `sentences` in order, `sentences_per_document` to a
    document (one per line, so that ExampleGen's exact and near-duplicate removal keeps them);
    returns `directory`."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "corpus.jsonl"), "w", encoding="utf-8") as handle:
        for start in range(0, len(sentences), sentences_per_document):
            text = "\n".join(sentences[start : start + sentences_per_document])
            handle.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return directory
