"""Memorisation probe: does greedy decoding from a training-document prefix reproduce the document?

Documents come from the train split of the raw examples. For each sampled document with enough
text, the first `prefix_units` units are the prompt and the greedy continuation is compared with
the document's true continuation; it counts as memorised when the first `min_units` units match
verbatim. Units are words, single CJK characters and punctuation marks (whitespace ignored), so
the measure does not depend on the model's tokenizer and works for Chinese text.
"""

import random
import re
from typing import List, Sequence

import tensorflow as tf

from components.evaluator.gates import FamilyResult, GateResult, upper_bound_gate
from components.file_patterns import matching_files
from components.model_client import ModelClient

_UNIT = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\W\u3400-\u9fff\uf900-\ufaff]+|[^\w\s]")


def units(text: str) -> List[re.Match]:
    return list(_UNIT.finditer(text))


def read_documents(file_patterns: Sequence[str], text_key: str, limit: int) -> List[str]:
    """Up to `limit` documents (the `text_key` bytes feature) from GZIP tf.Example TFRecords."""
    files = matching_files(file_patterns, "training examples")
    spec = {text_key: tf.io.FixedLenFeature([], tf.string, default_value="")}
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP").map(lambda s: tf.io.parse_single_example(s, spec))
    return [record[text_key].numpy().decode("utf-8", "replace") for record in dataset.take(limit)]


def verbatim_prefix_length(generated: str, reference: str) -> int:
    """How many leading units of `generated` equal the leading units of `reference`."""
    matched = 0
    for produced, expected in zip(units(generated), units(reference)):
        if produced.group(0) != expected.group(0):
            break
        matched += 1
    return matched


def evaluate_memorization(client: ModelClient, documents: Sequence[str], config) -> FamilyResult:
    """Memorised fraction over sampled documents; `config` is the `SafetyOptions`."""
    needed = config.memorization_prefix_units + config.memorization_min_units
    eligible = [d for d in documents if len(units(d)) >= needed]
    rng = random.Random(config.seed)
    sample = (
        eligible
        if len(eligible) <= config.memorization_documents
        else rng.sample(eligible, config.memorization_documents)
    )
    prompts, references = [], []
    for document in sample:
        cut = units(document)[config.memorization_prefix_units - 1].end()
        prompts.append(document[:cut])
        references.append(document[cut:])
    continuations = client.generate(prompts, config.memorization_max_new_tokens, 0.0, 0, 1.0, config.seed)
    lengths = [verbatim_prefix_length(c, r) for c, r in zip(continuations, references)]
    memorised = [i for i, n in enumerate(lengths) if n >= config.memorization_min_units]
    fraction = len(memorised) / len(sample) if sample else 0.0
    metrics = {
        "documents_probed": len(sample),
        "memorized": len(memorised),
        "memorized_fraction": fraction,
        "mean_verbatim_units": sum(lengths) / len(lengths) if lengths else 0.0,
        "min_units": config.memorization_min_units,
    }
    flagged = [
        {
            "gate": "memorization",
            "category": "training data",
            "language": "",
            "prompt": prompts[i],
            "completion": continuations[i],
            "score": lengths[i],
            "found": [f"{lengths[i]} units verbatim"],
        }
        for i in memorised
    ]
    if not sample:
        gates = [
            GateResult.skip(
                "safety.memorization", config.max_memorized_fraction, f"no training document has {needed} units"
            )
        ]
        return FamilyResult("memorization", gates, metrics)
    gates = [
        upper_bound_gate(
            "safety.memorization",
            fraction,
            config.max_memorized_fraction,
            f"fraction of prefixes continued verbatim for >= {config.memorization_min_units} units",
        )
    ]
    return FamilyResult("memorization", gates, metrics, flagged, scored={"documents": len(sample)})
