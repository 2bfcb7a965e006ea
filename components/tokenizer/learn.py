"""Learning a SentencePiece model from a sample of documents.

The model is made for exact round trips: no normalisation (`identity`), no dummy prefix, spaces
kept as they are, and byte fallback, so any UTF-8 text tokenizes without an unknown token and
detokenizes to itself. By default every digit is a piece of its own (`split_digits`), so no piece
joins a digit with another digit, a space or punctuation: a model copies `50440` as five known
tokens instead of memorising `▁504` `40:` (numbers.py measures it). The ids follow `ids.py`. Learning is deterministic for a given sample: the
sample is sorted first and SentencePiece runs single-threaded.

Two things adapt to the sample:
- its alphabet: SentencePiece makes a piece of every character needed to cover 99.95% of the
  sample's characters (`character_coverage`, which it does not accept below 0.98) and refuses
  ("Vocabulary size is smaller than required_chars") when they do not fit the vocabulary, as with
  Chinese text, which uses thousands of distinct characters. Byte fallback already encodes every
  character without a piece, so when the sample has more distinct characters than half of the
  learned pieces, only the most frequent ones that fit there are learned from: the sample is cut
  at the rarer ones (`fit_alphabet`), and the rest of the vocabulary stays for merges.
- the vocabulary size, when the user left it to the default (`learn_largest_model`): the largest
  vocabulary up to the default that the sample supports. An explicit size stays a requirement.

No raw SentencePiece error reaches the user: each becomes a `TokenizerLearningError` naming the
setting to change.
"""

import collections
import io
import logging
import re
from typing import Iterable, List, NamedTuple, Sequence, Tuple

import sentencepiece as spm

from components.tokenizer import ids

log = logging.getLogger(__name__)

# Longest sample chunk SentencePiece accepts, in bytes (longer ones would be skipped silently);
# `sample.py` cuts documents well below it.
MAX_SENTENCE_BYTES = 1 << 16
CHARACTER_COVERAGE = 0.9995  # SentencePiece's default (its recommendation for CJK)
CHARACTER_SHARE_OF_LEARNED = 0.5  # at most this share of the learned pieces goes to single characters


class TokenizerLearningError(ValueError):
    """SentencePiece could not learn a model from the sample; the message names the setting to change."""


class VocabularyTooLarge(TokenizerLearningError):
    """The sample cannot support the requested number of pieces."""

    def __init__(self, message: str, most: int):
        super().__init__(message)
        self.most = most  # the largest vocabulary SentencePiece said the sample supports


class PieceRules(NamedTuple):
    """Which characters a learned piece may join (the `tokenizer.*` options of the same names)."""

    pieces_cross_words: bool = True  # a piece may span a space (SentencePiece split_by_whitespace=false)
    split_digits: bool = True  # every digit is a piece of its own


DEFAULT_RULES = PieceRules()


class LearnedModel(NamedTuple):
    proto: bytes  # the serialized model
    vocab_size: int
    rare_characters: int  # distinct characters left to byte fallback by `fit_alphabet`


def fit_alphabet(sample: Sequence[str], vocab_size: int) -> Tuple[List[str], int]:
    """(`sample` cut at every character outside the CHARACTER_SHARE_OF_LEARNED * learned pieces
    most frequent ones, the number of distinct characters cut out); the sample itself when its
    alphabet fits. Cutting (rather than deleting) keeps pieces from joining characters that were
    never neighbours."""
    counts = collections.Counter(char for text in sample for char in text)
    budget = max(1, int((vocab_size - ids.FIRST_LEARNED_ID) * CHARACTER_SHARE_OF_LEARNED))
    if len(counts) <= budget:
        return list(sample), 0
    kept = sorted(char for char, _ in counts.most_common(budget))
    runs = re.compile("[" + "".join(re.escape(char) for char in kept) + "]+")
    return [run for text in sample for run in runs.findall(text)], len(counts) - budget


def _train(sample: List[str], vocab_size: int, algorithm: str, rules: PieceRules) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sample),
        model_writer=model,
        model_type=algorithm,
        vocab_size=vocab_size,
        byte_fallback=True,
        normalization_rule_name="identity",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        split_by_whitespace=not rules.pieces_cross_words,
        split_digits=rules.split_digits,
        character_coverage=CHARACTER_COVERAGE,
        max_sentence_length=MAX_SENTENCE_BYTES,
        pad_id=ids.PAD_ID,
        eos_id=ids.EOS_ID,
        unk_id=ids.UNK_ID,
        bos_id=-1,
        pad_piece=ids.PAD_PIECE,
        eos_piece=ids.EOS_PIECE,
        unk_piece=ids.UNK_PIECE,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def learn_model(
    documents: Iterable[str], vocab_size: int, algorithm: str = "bpe", rules: PieceRules = DEFAULT_RULES
) -> bytes:
    """A serialized SentencePiece model of exactly `vocab_size` pieces learned from `documents`."""
    return learn(documents, vocab_size, algorithm, rules).proto


def learn(
    documents: Iterable[str], vocab_size: int, algorithm: str = "bpe", rules: PieceRules = DEFAULT_RULES
) -> LearnedModel:
    """Learns exactly `vocab_size` pieces; raises `VocabularyTooLarge` when the sample supports
    fewer, and `TokenizerLearningError` for anything else SentencePiece refuses."""
    chunks = [document for document in documents if document]
    if not chunks:
        raise TokenizerLearningError("cannot learn a tokenizer from an empty sample")
    sample, rare = fit_alphabet(chunks, vocab_size)
    if rare:
        log.info(
            "Tokenizer: %d rare characters of the sample do not fit in %d pieces; byte fallback encodes them",
            rare,
            vocab_size,
        )
    try:
        proto = _train(sorted(sample), vocab_size, algorithm, rules)
    except RuntimeError as exc:
        most = re.search(r"value <= (\d+)", str(exc))
        if most:
            raise VocabularyTooLarge(
                f"tokenizer.vocab_size={vocab_size} is more than the sample supports with algorithm {algorithm} "
                f"(at most {most.group(1)} pieces): lower it, raise tokenizer.sample_size or add data",
                int(most.group(1)),
            ) from None
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise TokenizerLearningError(
            f"SentencePiece could not learn {vocab_size} pieces with algorithm {algorithm} from "
            f"{len(chunks)} sample chunks ({reason}): change tokenizer.vocab_size or tokenizer.algorithm, "
            "or add data"
        ) from None
    return LearnedModel(proto, vocab_size, rare)


def learn_largest_model(
    documents: Iterable[str], max_vocab_size: int, algorithm: str = "bpe", rules: PieceRules = DEFAULT_RULES
) -> LearnedModel:
    """The largest vocabulary up to `max_vocab_size` that the sample supports (SentencePiece says
    how many pieces it supports when asked for too many; that size is learned instead)."""
    sample = [document for document in documents if document]
    vocab_size = max_vocab_size
    for _ in range(3):  # the supported size is exact for BPE; unigram may need another step down
        try:
            return learn(sample, vocab_size, algorithm, rules)
        except VocabularyTooLarge as exc:
            if exc.most < ids.MIN_VOCAB_SIZE:
                raise VocabularyTooLarge(
                    f"the sample supports at most {exc.most} pieces with algorithm {algorithm}, fewer than the smallest "
                    f"vocabulary ({ids.MIN_VOCAB_SIZE}): raise tokenizer.sample_size or add data",
                    exc.most,
                ) from None
            vocab_size = min(exc.most, vocab_size - 1)
    return learn(sample, vocab_size, algorithm, rules)
