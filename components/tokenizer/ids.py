"""Token ids (the one place they are defined).

Every SentencePiece model the project learns or accepts has this layout, so the trainer, the
decoder and the evaluator can rely on fixed ids whatever the vocabulary:

    0        [PAD]    padding, never a training target
    1        [EOS]    end of document; also the separator before every document
    2        [UNK]    never produced: byte fallback covers every input
    3..258   <0x00>..<0xFF>   byte fallback pieces, one per byte value
    259..    learned pieces, up to `tokenizer.vocab_size`

SentencePiece places the three control pieces at the ids it is told and the 256 byte pieces right
after them, so `learn.py` only has to say so; `model_file.check_layout` refuses a model that
differs (a pinned file made elsewhere).
"""

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
PAD_PIECE, EOS_PIECE, UNK_PIECE = "[PAD]", "[EOS]", "[UNK]"
NUM_SPECIAL = 3
FIRST_BYTE_ID = NUM_SPECIAL
NUM_BYTES = 256
FIRST_LEARNED_ID = FIRST_BYTE_ID + NUM_BYTES
# The smallest useful vocabulary: the special and byte pieces plus a few learned ones.
MIN_VOCAB_SIZE = FIRST_LEARNED_ID + 61


def byte_id(value: int) -> int:
    """The id of the byte-fallback piece for byte `value` (0..255)."""
    return FIRST_BYTE_ID + value
