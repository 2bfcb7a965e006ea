"""A checkpoint's SentencePiece model (Llama 2, TinyLlama, Mistral) inside a TF graph.

Tokenizing is TF Text's SentencePiece op on the checkpoint's own `tokenizer.model`, with no
bos/eos added (documents are framed with `special.SpecialTokens`): it runs the model's
normalizer, dummy prefix and byte fallback exactly as the `sentencepiece` library, and gives the
ids Hugging Face's converted `tokenizer.json` gives. Unlike the pipeline's learned model
(`graph.py`), a literal '▁' in the text is not escaped: the checkpoint's tokenizer turns it into
a space, and matching its ids matters more here than the round trip of that one character.

Detokenizing follows Hugging Face's Llama decoder rather than the op's: each piece's text ('▁' as
a space, byte pieces as their byte, control and unknown pieces as nothing), joined, then exactly
one leading space removed (the dummy prefix). The op would remove every leading space, so text
that starts with spaces would not come back.
"""
import tensorflow as tf
import tensorflow_text as tf_text

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


class CheckpointSentencePieceGraph(tf.Module):
    """Text <-> token ids with a checkpoint's SentencePiece model (see module docstring)."""

    def __init__(self, model_proto: bytes, name: str = "checkpoint_sentencepiece"):
        super().__init__(name=name)
        self._sentencepiece = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32)
        texts = piece_bytes(model_proto)
        self._size = len(texts)
        self._id_bytes = tf.constant(texts, tf.string)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[batch] strings -> ragged [batch, (tokens)] int64 ids."""
        return tf.cast(self._sentencepiece.tokenize(tf.reshape(texts, [-1])), tf.int64)

    def detokenize(self, token_ids) -> tf.Tensor:
        """Ragged [batch, (tokens)] ids -> [batch] UTF-8 strings (invalid UTF-8 becomes U+FFFD)."""
        if not isinstance(token_ids, tf.RaggedTensor):
            token_ids = tf.RaggedTensor.from_tensor(token_ids)
        pieces = tf.gather(self._id_bytes, tf.clip_by_value(tf.cast(token_ids, tf.int64), 0, self._size - 1))
        joined = tf.strings.reduce_join(pieces, axis=1)
        joined = tf.strings.regex_replace(joined, "^ ", "", replace_global=False)
        return tf.strings.unicode_transcode(joined, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
