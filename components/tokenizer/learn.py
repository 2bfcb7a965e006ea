"""Learning a SentencePiece model from a sample of documents.

The model is made for exact round trips: no normalisation (`identity`), no dummy prefix, spaces
kept as they are, and byte fallback, so any UTF-8 text tokenizes without an unknown token and
detokenizes to itself. The ids follow `ids.py`. Learning is deterministic for a given sample: the
sample is sorted first and SentencePiece runs single-threaded.
"""
import io
import re
from typing import Iterable

import sentencepiece as spm

from components.tokenizer import ids

# Longest sample chunk SentencePiece accepts, in bytes (longer ones would be skipped silently);
# `sample.py` cuts documents well below it.
MAX_SENTENCE_BYTES = 1 << 16


class VocabularyTooLarge(ValueError):
    """The sample cannot support the requested number of pieces."""


def learn_model(documents: Iterable[str], vocab_size: int, algorithm: str = "bpe",
                pieces_cross_words: bool = True) -> bytes:
    """A serialized SentencePiece model of exactly `vocab_size` pieces learned from `documents`."""
    sample = sorted(document for document in documents if document)
    if not sample:
        raise ValueError("cannot learn a tokenizer from an empty sample")
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sample),
            model_writer=model,
            model_type=algorithm,
            vocab_size=vocab_size,
            byte_fallback=True,
            normalization_rule_name="identity",
            add_dummy_prefix=False,
            remove_extra_whitespaces=False,
            split_by_whitespace=not pieces_cross_words,
            character_coverage=0.9995,
            max_sentence_length=MAX_SENTENCE_BYTES,
            pad_id=ids.PAD_ID, eos_id=ids.EOS_ID, unk_id=ids.UNK_ID, bos_id=-1,
            pad_piece=ids.PAD_PIECE, eos_piece=ids.EOS_PIECE, unk_piece=ids.UNK_PIECE,
            num_threads=1,
            minloglevel=2,
        )
    except RuntimeError as exc:
        most = re.search(r"value <= (\d+)", str(exc))
        if most:
            raise VocabularyTooLarge(
                f"tokenizer.vocab_size={vocab_size} is more than the sample supports with algorithm {algorithm} "
                f"(at most {most.group(1)} pieces): lower it, raise tokenizer.sample_size or add data") from None
        raise
    return model.getvalue()
