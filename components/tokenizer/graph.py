"""Tokenizing and detokenizing with a SentencePiece model inside a TF graph (TF Text ops).

TF Text's SentencePiece ops load in stock TF Serving, so the transform graph and the exported
model carry the same tokenizer. The model travels as bytes: `SentencepieceTokenizer` embeds them
in the graph at trace time.

One character needs care for an exact round trip: SentencePiece writes a space as U+2581 ('▁')
inside pieces and turns every '▁' back into a space when decoding, so a literal '▁' in the text
would come back as a space. Each text is therefore split at its literal '▁'s, the parts are
tokenized, and the '▁' between them is spelled with its three byte-fallback pieces (E2 96 81),
which decode to the character itself.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from components.tokenizer import ids

SPACE_SYMBOL = "\u2581"
_SPACE_SYMBOL_IDS = [ids.byte_id(value) for value in SPACE_SYMBOL.encode("utf-8")]


class GraphTokenizer(tf.Module):
    """Text <-> token ids with one SentencePiece model (see module docstring)."""

    def __init__(self, model_proto: bytes, name: str = "sentencepiece"):
        super().__init__(name=name)
        self._sentencepiece = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32)

    def tokenize(self, texts: tf.Tensor, starts_input=None) -> tf.RaggedTensor:
        """[batch] strings -> ragged [batch, (tokens)] int64 ids; never an unknown token.
        `starts_input` (sentencepiece_bpe_graph.py) changes nothing: SentencePiece puts its dummy
        prefix before every text it encodes."""
        del starts_input
        texts = tf.reshape(texts, [-1])
        parts = tf.strings.split(texts, sep=SPACE_SYMBOL)  # [batch, (parts)]; one part per text without '▁'
        return tf.cond(
            tf.reduce_any(parts.row_lengths() > 1),
            lambda: self._tokenize_parts(parts),
            lambda: self._tokenize_plain(texts),
        )

    def _tokenize_plain(self, texts: tf.Tensor) -> tf.RaggedTensor:
        return tf.cast(self._sentencepiece.tokenize(texts), tf.int64)

    def _tokenize_parts(self, parts: tf.RaggedTensor) -> tf.RaggedTensor:
        """Tokenizes each part and joins the parts of a text with the byte pieces of '▁'."""
        part_ids = self._tokenize_plain(parts.flat_values)  # [parts, (tokens)]
        symbol = tf.constant(_SPACE_SYMBOL_IDS, tf.int64)
        symbols = tf.RaggedTensor.from_uniform_row_length(tf.tile(symbol, [part_ids.nrows()]), len(_SPACE_SYMBOL_IDS))
        with_symbol = tf.concat([part_ids, symbols], axis=1)  # every part followed by '▁'
        per_text = tf.RaggedTensor.from_row_splits(with_symbol, parts.row_splits).merge_dims(1, 2)
        return per_text[:, : -len(_SPACE_SYMBOL_IDS)]  # no '▁' after a text's last part

    def detokenize(self, token_ids) -> tf.Tensor:
        """Ragged [batch, (tokens)] ids -> [batch] UTF-8 strings. Special tokens decode to nothing;
        byte pieces that do not form valid UTF-8 (a generation can stop mid-character) decode to
        U+FFFD, as SentencePiece does."""
        return self._sentencepiece.detokenize(tf.cast(token_ids, tf.int32))
