"""A SentencePiece-style `tokenizer.json` (Llama 2, TinyLlama, Mistral as transformers saves them)
inside a TF graph, on core TF ops: the ids Hugging Face `tokenizers` gives from that file.

`tokenizers` runs, and so does this graph, on each text's characters (code points):

1. Normalizer: `Replace` of one character by another (' ' -> '▁') and `Prepend` of a string to a
   non-empty text (the dummy prefix '▁'), in the file's order.
2. Pre-tokenizer: none, or `Metaspace`: spaces become '▁', a '▁' is put before a text that does
   not start with one (prepend_scheme `always`; with `first` only before a text that begins the
   input: `tokenizers` splits the input at special tokens first, and a text after a special token
   does not begin it, which `tokenize(..., starts_input)` says for each text), and with `split`
   every '▁' starts a new word (merged with the text after it).
   Without a split the whole text is one word for `tokenizers`. Where no merge of the file makes a
   token in which a '▁' follows another character, no merge can cross the point before a run of
   '▁', so the text is cut there (same ids, far fewer merge rounds); otherwise it stays whole.
3. Model: each character is its own token when the vocabulary has it, else its UTF-8 bytes as
   byte-fallback tokens (<0x0A>), then the merges in `tokenizers`' order (bpe_merges.py).

Special tokens are never made from text (`tokenizers` with `encode_special_tokens=True`, as in
bpe_graph.py). A normalizer's `Prepend` applies to every text, the ones after a special token
too (`tokenizers` normalizes each piece between special tokens). Detokenizing is piece_decoding.py.
"""

from typing import Dict, Iterable, NamedTuple, Sequence, Tuple

import numpy as np
import tensorflow as tf

from components.tokenizer import bpe_merges, piece_decoding

SPACE_SYMBOL = "\u2581"


class TextSteps(NamedTuple):
    """What a SentencePiece-style tokenizer.json does to text before its BPE model (hf_files.py
    reads it): normalizer steps in order, ("replace", old, new) or ("prepend", text); the
    Metaspace pre-tokenizer (`metaspace_prepend`: it puts '▁' before a text; `metaspace_first`:
    only before a text that begins the input, prepend_scheme `first`; `metaspace_split`: it splits
    at '▁'; `metaspace`: whether there is one); the decoder's `Strip` of one space."""

    normalizer: Tuple[tuple, ...] = ()
    metaspace: bool = False
    metaspace_prepend: bool = False
    metaspace_split: bool = False
    strip_one_space: bool = True
    metaspace_first: bool = False


def byte_token(value: int) -> str:
    """The byte-fallback token of byte `value`, as SentencePiece and `tokenizers` spell it."""
    return f"<0x{value:02X}>"


class SentencePieceBpeGraph(tf.Module):
    """Text <-> token ids with a SentencePiece-style tokenizer.json (see module docstring)."""

    def __init__(
        self,
        vocab: Dict[str, int],
        merges: Sequence[Tuple[str, str]],
        special_ids: Iterable[int],
        steps: TextSteps,
        source: str = "tokenizer.json",
        name: str = "sentencepiece_bpe",
    ):
        super().__init__(name=name)
        self._steps = steps
        size = max(vocab.values()) + 1
        special = set(special_ids)
        missing = [byte_token(value) for value in range(256) if byte_token(value) not in vocab]
        if missing:
            raise ValueError(
                f"{source}: model.vocab lacks {len(missing)} of the 256 byte-fallback tokens "
                f"(e.g. {missing[0]}): some text would become the unknown token"
            )
        self._byte_ids = tf.constant([vocab[byte_token(value)] for value in range(256)], tf.int64)
        singles = sorted(
            (ord(token), index) for token, index in vocab.items() if len(token) == 1 and index not in special
        )
        self._char_codes = tf.constant([code for code, _ in singles] + [np.iinfo(np.int64).max], tf.int64)
        self._char_ids = tf.constant([index for _, index in singles] + [-1], tf.int64)
        self._merges = bpe_merges.MergeTable(merges, vocab, size, source)
        # Cutting before runs of '▁' is safe unless a merge makes a token with '▁' after another character.
        self._cut_before_spaces = not any(_space_after_other(left + right) for left, right in merges)
        texts, byte_flags = [b""] * size, [False] * size
        byte_values = {byte_token(value): value for value in range(256)}
        for token, index in vocab.items():
            if index in special:
                continue
            if token in byte_values:
                texts[index], byte_flags[index] = bytes([byte_values[token]]), True
            else:
                texts[index] = token.replace(SPACE_SYMBOL, " ").encode("utf-8")
        self._id_bytes = tf.constant(texts, tf.string)
        self._is_byte = tf.constant(byte_flags)

    def tokenize(self, texts: tf.Tensor, starts_input=None) -> tf.RaggedTensor:
        """[batch] strings -> ragged [batch, (tokens)] int64 ids. `starts_input` ([batch] bool,
        default all true): whether each text begins the input, or follows a special token of it
        (a chat template's rendering is tokenized text by text; module docstring, step 2)."""
        texts = tf.reshape(texts, [-1])
        chars = tf.cast(tf.strings.unicode_decode(texts, "UTF-8", errors="replace"), tf.int64)
        chars = self._pre_tokenize(self._normalize(chars), starts_input)
        flat = chars.flat_values
        text_of_char = chars.value_rowids()
        word_start = tf.equal(tf.ragged.range(chars.row_lengths()).flat_values, 0) | self._word_starts(chars)
        word_of_char = tf.cumsum(tf.cast(word_start, tf.int64)) - 1
        text_of_word = tf.boolean_mask(text_of_char, word_start)
        # Each character: its own token, or its UTF-8 bytes as byte-fallback tokens.
        slot = tf.searchsorted(self._char_codes, flat, side="left", out_type=tf.int64)
        known = tf.equal(tf.gather(self._char_codes, slot), flat)
        char_bytes = tf.strings.unicode_decode(
            tf.strings.unicode_encode(tf.cast(flat[:, tf.newaxis], tf.int32), "UTF-8"), "ISO-8859-1"
        )
        char_known = tf.gather(known, char_bytes.value_rowids())
        first_byte = tf.equal(tf.ragged.range(char_bytes.row_lengths()).flat_values, 0)
        values = tf.where(
            char_known,
            tf.gather(tf.gather(self._char_ids, slot), char_bytes.value_rowids()),
            tf.gather(self._byte_ids, tf.cast(char_bytes.flat_values, tf.int64)),
        )
        keep = first_byte | tf.logical_not(char_known)
        symbols = tf.boolean_mask(values, keep)
        word_of_symbol = tf.boolean_mask(tf.gather(word_of_char, char_bytes.value_rowids()), keep)
        symbols, word_of_symbol = self._merges.merge(symbols, word_of_symbol)
        return tf.RaggedTensor.from_value_rowids(
            symbols, tf.gather(text_of_word, word_of_symbol), nrows=tf.size(texts, out_type=tf.int64)
        )

    def _normalize(self, chars: tf.RaggedTensor) -> tf.RaggedTensor:
        for step in self._steps.normalizer:
            if step[0] == "replace":
                chars = chars.with_flat_values(
                    tf.where(
                        tf.equal(chars.flat_values, ord(step[1])),
                        tf.constant(ord(step[2]), tf.int64),
                        chars.flat_values,
                    )
                )
            else:
                chars = _prepend(chars, step[1], chars.row_lengths() > 0)
        return chars

    def _pre_tokenize(self, chars: tf.RaggedTensor, starts_input) -> tf.RaggedTensor:
        if not self._steps.metaspace:
            return chars
        space = tf.constant(ord(SPACE_SYMBOL), tf.int64)
        chars = chars.with_flat_values(tf.where(tf.equal(chars.flat_values, ord(" ")), space, chars.flat_values))
        if self._steps.metaspace_prepend:
            first = tf.gather(tf.concat([chars.flat_values, space[tf.newaxis]], axis=0), chars.row_splits[:-1])
            where = (chars.row_lengths() > 0) & tf.not_equal(first, space)
            if self._steps.metaspace_first and starts_input is not None:
                where &= tf.reshape(tf.cast(starts_input, tf.bool), [-1])
            chars = _prepend(chars, SPACE_SYMBOL, where)
        return chars

    def _word_starts(self, chars: tf.RaggedTensor) -> tf.Tensor:
        """Whether each character (flat) starts a word other than its text's first (see step 2)."""
        flat = chars.flat_values
        is_space = tf.equal(flat, ord(SPACE_SYMBOL))
        if self._steps.metaspace and self._steps.metaspace_split:
            return is_space
        if not self._cut_before_spaces:
            return tf.zeros_like(is_space)
        return is_space & tf.logical_not(tf.concat([[False], is_space[:-1]], axis=0))

    def detokenize(self, token_ids) -> tf.Tensor:
        """Ragged [batch, (tokens)] ids -> [batch] UTF-8 strings (piece_decoding.py)."""
        return piece_decoding.detokenize_pieces(token_ids, self._id_bytes, self._is_byte, self._steps.strip_one_space)


def _space_after_other(token: str) -> bool:
    return any(second == SPACE_SYMBOL and first != SPACE_SYMBOL for first, second in zip(token, token[1:]))


def _prepend(chars: tf.RaggedTensor, text: str, where: tf.Tensor) -> tf.RaggedTensor:
    """`text`'s code points put before each row of `chars` for which `where` holds."""
    codes = tf.constant([ord(char) for char in text], tf.int64)
    count = tf.reduce_sum(tf.cast(where, tf.int64))
    prefix = tf.RaggedTensor.from_row_lengths(tf.tile(codes, [count]), tf.cast(where, tf.int64) * len(text))
    return tf.concat([prefix, chars], axis=1)
