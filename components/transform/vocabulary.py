"""Learning the WordPiece vocabulary inside TF Transform's analyze phase.

`learn_vocabulary` runs as a `tft.experimental.ptransform_analyzer`: Beam counts the pre-tokens of
the train split (a distributed combine, so it scales with the runner), then one worker runs
TF Text's WordPiece learner on the counts and writes the vocabulary file, which TF Transform
ships as an asset of the transform graph.

The result is deterministic: counts are sorted before learning, the learner is deterministic,
and the file lists the fixed base vocabulary first and learned pieces in the learner's order.
"""
import os
from typing import Iterable, List, Tuple

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from components.transform import tokenizer

VOCABULARY_FILE_NAME = "wordpiece_vocabulary.txt"


def learned_pieces(word_counts: Iterable[Tuple[str, int]], vocab_size: int) -> List[str]:
    """The full vocabulary (base tokens first) learned from (pre-token, count) pairs.

    At most `vocab_size` entries; never fewer than the base vocabulary.
    """
    base = tokenizer.base_vocabulary()
    budget = vocab_size - len(base)
    if budget <= 0:
        return base[:max(vocab_size, len(base))]
    counts = sorted(word_counts)
    learned = learner.learn(
        counts,
        vocab_size=vocab_size,
        reserved_tokens=[],
        lower_thresh=1,
        max_token_length=50,
        include_joiner_token=False,
        joiner=tokenizer.SUFFIX_INDICATOR,
    ) if counts else []
    known = set(base)
    extra = []
    for piece in learned:
        if piece not in known and piece != tokenizer.SUFFIX_INDICATOR:
            known.add(piece)
            extra.append(piece)
    return base + extra[:budget]


class _LearnAndWriteVocabulary(tft_beam.experimental.PTransformAnalyzer):
    """Beam part of the analyzer: count pre-tokens, learn, write the file, output its path."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self._vocab_size = vocab_size

    def _write(self, counts: List[Tuple[bytes, int]]) -> np.ndarray:
        pieces = learned_pieces(((word.decode("utf-8"), count) for word, count in counts), self._vocab_size)
        tf.io.gfile.makedirs(self.base_temp_dir)
        path = os.path.join(self.base_temp_dir, VOCABULARY_FILE_NAME)
        with tf.io.gfile.GFile(path, "w") as handle:
            handle.write("".join(piece + "\n" for piece in pieces))
        return np.array(path.encode("utf-8"))

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        return (
            batches
            | "PreTokens" >> beam.FlatMap(lambda batch: batch[0].tolist())
            | "Count" >> beam.combiners.Count.PerElement()
            | "Gather" >> beam.combiners.ToList()
            | "LearnAndWrite" >> beam.Map(self._write)
        )


def learn_vocabulary(pretokens: tf.RaggedTensor, vocab_size: int) -> tf.Tensor:
    """Analyzer: the path of the vocabulary learned from all `pretokens` of the analyzed data."""
    (path,) = tft.experimental.ptransform_analyzer(
        inputs=[pretokens.flat_values],
        ptransform=_LearnAndWriteVocabulary(vocab_size),
        output_dtypes=[tf.string],
        output_shapes=[[]],
        output_asset_default_values=[VOCABULARY_FILE_NAME.encode("utf-8")],
        name="learn_wordpiece_vocabulary",
    )
    # Lets consumers find the file by name: TFTransformOutput.vocabulary_file_by_name(...).
    tft.annotate_asset(tokenizer.VOCABULARY_ASSET_NAME, VOCABULARY_FILE_NAME)
    return path
