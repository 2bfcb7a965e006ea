"""A checkpoint's SentencePiece model (Llama 2, TinyLlama, Mistral) inside a TF graph.

Tokenizing is TF Text's SentencePiece op on the checkpoint's own `tokenizer.model`, with no
bos/eos added (documents are framed with `special.SpecialTokens`): it runs the model's
normalizer, dummy prefix and byte fallback exactly as the `sentencepiece` library, and gives the
ids Hugging Face's converted `tokenizer.json` gives. Unlike the pipeline's learned model
(`graph.py`), a literal '▁' in the text is not escaped: the checkpoint's tokenizer turns it into
a space, and matching its ids matters more here than the round trip of that one character.

Detokenizing follows Hugging Face's Llama decoder rather than the op's: each piece's text ('▁' as
a space, byte pieces as their byte, control and unknown pieces as nothing), consecutive byte
pieces decoded together (one U+FFFD per byte when they are not valid UTF-8), joined, then exactly
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

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """[batch] strings -> ragged [batch, (tokens)] int64 ids."""
        return tf.cast(self._sentencepiece.tokenize(tf.reshape(texts, [-1])), tf.int64)

    def detokenize(self, token_ids) -> tf.Tensor:
        """Ragged [batch, (tokens)] ids -> [batch] UTF-8 strings. A run of consecutive byte pieces
        that is not valid UTF-8 becomes one U+FFFD per byte, as Hugging Face's ByteFallback decoder
        does (a generation can stop mid-character)."""
        if not isinstance(token_ids, tf.RaggedTensor):
            token_ids = tf.RaggedTensor.from_tensor(token_ids)
        token_ids = tf.clip_by_value(tf.cast(token_ids, tf.int64), 0, self._size - 1)
        # Control and unknown pieces (no text) go first, so byte pieces around them form one run.
        token_ids = tf.ragged.boolean_mask(token_ids, tf.gather(self._is_byte, token_ids) |
                                           tf.not_equal(tf.gather(self._id_bytes, token_ids), ""))
        flat = token_ids.flat_values
        texts = tf.gather(self._id_bytes, flat)
        is_byte = tf.gather(self._is_byte, flat)
        row = token_ids.value_rowids()
        # Runs of byte pieces within a row: a run starts at a byte piece whose predecessor is not
        # a byte piece of the same row.
        previous_is_byte = tf.concat([[False], is_byte[:-1] & tf.equal(row[:-1], row[1:])], axis=0)
        starts = is_byte & tf.logical_not(previous_is_byte)
        run = tf.cumsum(tf.cast(starts, tf.int64)) - 1
        num_runs = tf.reduce_sum(tf.cast(starts, tf.int64))
        run_of_byte = tf.boolean_mask(run, is_byte)
        joined_runs = tf.strings.unsorted_segment_join(tf.boolean_mask(texts, is_byte), run_of_byte, num_runs)
        valid = tf.equal(tf.strings.unicode_transcode(joined_runs, "UTF-8", "UTF-8", errors="replace",
                                                      replacement_char=0xFFFD), joined_runs)
        lengths = tf.strings.length(joined_runs)
        replaced = tf.strings.reduce_join(
            tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(lengths)], "\ufffd"), lengths), axis=1)
        run_texts = tf.where(valid, joined_runs, replaced)
        # The run's text goes on its first piece; its other pieces contribute nothing.
        run_texts = tf.concat([run_texts, [""]], axis=0)  # never empty: gathered for every piece below
        texts = tf.where(starts, tf.gather(run_texts, tf.maximum(run, 0)), tf.where(is_byte, "", texts))
        joined = tf.strings.reduce_join(token_ids.with_flat_values(texts), axis=1)
        return tf.strings.regex_replace(joined, "^ ", "", replace_global=False)
