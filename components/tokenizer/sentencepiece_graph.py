"""A checkpoint's SentencePiece model (Llama 2, TinyLlama, Mistral) inside a TF graph.

Tokenizing is TF Text's SentencePiece op on the checkpoint's own `tokenizer.model`, with no
bos/eos added (documents are framed with `special.SpecialTokens`): it runs the model's
normalizer, dummy prefix and byte fallback exactly as the `sentencepiece` library, and gives the
ids Hugging Face's converted `tokenizer.json` gives when the model does not normalise text
(`identity`). Unlike the pipeline's learned model
(`graph.py`), a literal '▁' in the text is not escaped: the checkpoint's tokenizer turns it into
a space, and matching its ids matters more here than the round trip of that one character.

Used only for a checkpoint that has no `tokenizer.json` (transformers converts `tokenizer.model`
then, with the same result for the models Llama 2's settings make); with a `tokenizer.json` its
own graph is used (sentencepiece_bpe_graph.py).

Detokenizing follows Hugging Face's Llama decoder rather than the op's (piece_decoding.py;
control and unknown pieces decode to nothing): the op would remove every leading space, so
text that starts with spaces would not come back.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from components.tokenizer import piece_decoding

SPACE_SYMBOL = "\u2581"


def piece_bytes(proto: bytes) -> list:
    """Each id's decoded bytes (see module docstring)."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=proto)
    texts = []
    for index in range(processor.get_piece_size()):
        piece = processor.id_to_piece(index)
        if processor.is_byte(index):
            texts.append(bytes([int(piece[3:5], 16)]))  # '<0xAB>'
        elif processor.is_control(index) or processor.is_unknown(index):
            texts.append(b"")
        else:
            texts.append(piece.replace(SPACE_SYMBOL, " ").encode("utf-8"))
    return texts


def byte_pieces(proto: bytes) -> list:
    """Whether each id is a byte-fallback piece."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=proto)
    return [bool(processor.is_byte(index)) for index in range(processor.get_piece_size())]


class CheckpointSentencePieceGraph(tf.Module):
    """Text <-> token ids with a checkpoint's SentencePiece model (see module docstring)."""

    def __init__(self, model_proto: bytes, name: str = "checkpoint_sentencepiece"):
        super().__init__(name=name)
        self._sentencepiece = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32)
        texts = piece_bytes(model_proto)
        self._size = len(texts)
        self._id_bytes = tf.constant(texts, tf.string)
        self._is_byte = tf.constant(byte_pieces(model_proto))

    def tokenize(self, texts: tf.Tensor, starts_input=None) -> tf.RaggedTensor:
        """[batch] strings -> ragged [batch, (tokens)] int64 ids. `starts_input`
        (sentencepiece_bpe_graph.py) changes nothing: SentencePiece puts its dummy prefix before
        every text it encodes, as transformers' legacy Llama tokenizer does after special tokens."""
        del starts_input
        return tf.cast(self._sentencepiece.tokenize(tf.reshape(texts, [-1])), tf.int64)

    def detokenize(self, token_ids) -> tf.Tensor:
        """Ragged [batch, (tokens)] ids -> [batch] UTF-8 strings (piece_decoding.py)."""
        return piece_decoding.detokenize_pieces(token_ids, self._id_bytes, self._is_byte)
