"""The tokenizer shared by Transform, the trainer, the evaluator and the serving signatures.

Byte-level WordPiece, learned from the corpus during Transform's analyze phase.

Why WordPiece: TF Text's `WordpieceTokenizer` takes its vocabulary as a lookup table built from an
asset file, which a TF Transform analyzer can write during the analyze phase, and its op loads in
stock TF Serving. SentencePiece needs its model as a trace-time attribute, so it cannot be learned
and applied in one `preprocessing_fn`; BPE has no serving-safe TF op. The vocabulary is learned
with TF Text's own WordPiece learner (`wordpiece_tokenizer_learner_lib`) on pre-token counts
gathered with Beam (see `vocabulary.py`).

Why byte-level: every UTF-8 byte is first mapped to one printable character of a fixed 256-symbol
alphabet, and all 256 symbols (and their `##` continuation forms) are always in the vocabulary.
Any text, in any script, therefore tokenizes without an out-of-vocabulary case, and
`detokenize(tokenize(text)) == text` exactly. Learned pieces only make common byte sequences
cheaper.

Pipeline (all ops load in stock TF Serving: TF Text's RegexSplitWithOffsets and
WordpieceTokenizeWithOffsets, and core TensorFlow ops):
    text -> bytes -> alphabet symbols -> pre-tokens (optional space + run of letters | digits |
    other symbols, or a run of whitespace; at most 48 symbols) -> WordPiece ids

Token ids (the one place they are defined):
    0 [PAD]   padding, never a training target
    1 [EOS]   end of document; also the separator that precedes every document
    2 [UNK]   never produced for valid input (kept because WordpieceTokenizer needs one)
    3 .. 258      the 256 byte symbols at the start of a pre-token
    259 .. 514    the same symbols as continuations (`##` + symbol)
    515 ..        learned pieces, up to the configured vocabulary size
"""
from typing import List

import tensorflow as tf
import tensorflow_text as tf_text

SPECIAL_TOKENS = ("[PAD]", "[EOS]", "[UNK]")
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
SUFFIX_INDICATOR = "##"
VOCABULARY_ASSET_NAME = "wordpiece_vocabulary"
# Pre-tokens are cut from the text already spelled in the byte alphabet (so NUL and invalid
# sequences need no special case): an optional space ('Ġ') + a run of letters (ASCII letters or
# any byte >= 0x80, i.e. every non-ASCII character), of digits, or of other symbols; or a run of
# whitespace. Every symbol matches one branch, so the pre-tokens concatenate back to the text.
_LETTERS = r"A-Za-z\x{180}-\x{1FF}"
_DIGITS = r"0-9"
_SPACES = r"\x{109}-\x{10D}\x{120}"  # \t \n \v \f \r and ' ' in the alphabet
PRETOKEN_PATTERN = (
    rf"\x{{120}}?[{_LETTERS}]+|\x{{120}}?[{_DIGITS}]+|\x{{120}}?[^{_LETTERS}{_DIGITS}{_SPACES}]+|[{_SPACES}]+"
)
# Long pre-tokens are cut into chunks of at most this many symbols (bounds WordPiece's work per
# word; a bounded repetition in the pattern above would blow up RE2's DFA).
MAX_SYMBOLS_PER_PRETOKEN = 48
CHUNK_PATTERN = r".{1,%d}" % MAX_SYMBOLS_PER_PRETOKEN
# Each symbol is at most 2 UTF-8 bytes.
MAX_BYTES_PER_WORD = MAX_SYMBOLS_PER_PRETOKEN * 2


def byte_alphabet() -> List[str]:
    """The symbol for each byte value: printable ASCII except '#' stands for itself, every other
    byte b for the character U+0100 + b (so ' ' is 'Ġ' and '\\n' is 'Ċ'). '#' is excluded so the
    `##` continuation prefix is never ambiguous, and no symbol is whitespace, so the vocabulary
    file has one piece per line."""
    return [chr(b) if 0x21 <= b <= 0x7E and b != ord("#") else chr(0x100 + b) for b in range(256)]


def base_vocabulary() -> List[str]:
    """Special tokens, then every byte symbol, then every byte symbol as a continuation."""
    alphabet = byte_alphabet()
    return list(SPECIAL_TOKENS) + alphabet + [SUFFIX_INDICATOR + symbol for symbol in alphabet]


NUM_BASE_TOKENS = len(SPECIAL_TOKENS) + 2 * 256
FIRST_BYTE_ID = len(SPECIAL_TOKENS)


def to_symbols(texts: tf.Tensor) -> tf.Tensor:
    """[batch] strings -> [batch] strings with every byte replaced by its alphabet symbol."""
    text_bytes = tf.strings.bytes_split(texts)  # [batch, (bytes)] one-byte strings
    # Every element is exactly one byte; reshape (not [:, 0]) also handles a batch with no bytes.
    byte_values = tf.cast(tf.reshape(tf.io.decode_raw(text_bytes.flat_values, tf.uint8), [-1]), tf.int32)
    symbols = tf.gather(tf.constant(byte_alphabet()), byte_values)
    return tf.strings.reduce_join(text_bytes.with_flat_values(symbols), axis=-1)


def pretokenize(texts: tf.Tensor) -> tf.RaggedTensor:
    """[batch] strings -> ragged [batch, (pre-tokens)] strings spelled in the byte alphabet."""
    words = tf_text.regex_split(to_symbols(texts), PRETOKEN_PATTERN, keep_delim_regex_pattern=PRETOKEN_PATTERN)
    return tf_text.regex_split(words, CHUNK_PATTERN, keep_delim_regex_pattern=CHUNK_PATTERN).merge_dims(1, 2)


def piece_to_id_table(vocabulary_file) -> tf.lookup.StaticHashTable:
    """Vocabulary piece -> id (its line number) from the vocabulary asset."""
    initializer = tf.lookup.TextFileInitializer(
        vocabulary_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER
    )
    return tf.lookup.StaticHashTable(initializer, UNK_ID)


def id_to_piece_table(vocabulary_file) -> tf.lookup.StaticHashTable:
    """Id (line number) -> vocabulary piece, for detokenization."""
    initializer = tf.lookup.TextFileInitializer(
        vocabulary_file, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE
    )
    return tf.lookup.StaticHashTable(initializer, "")


def tokenize_pretokens(pretokens: tf.RaggedTensor, piece_ids: tf.lookup.StaticHashTable) -> tf.RaggedTensor:
    """Ragged [batch, (pre-tokens)] alphabet strings -> ragged [batch, (tokens)] int64 ids."""
    wordpiece = tf_text.WordpieceTokenizer(
        piece_ids,
        suffix_indicator=SUFFIX_INDICATOR,
        max_bytes_per_word=MAX_BYTES_PER_WORD,
        token_out_type=tf.int64,
        unknown_token=SPECIAL_TOKENS[UNK_ID],
    )
    return wordpiece.tokenize(pretokens).merge_dims(1, 2)


def detokenize(token_ids, id_to_piece: tf.lookup.StaticHashTable) -> tf.Tensor:
    """Ragged [batch, (tokens)] ids -> [batch] strings; special tokens are dropped.

    The joined pieces are alphabet symbols; each symbol is mapped back to its byte. A sequence
    the model generated may be invalid UTF-8; the bytes are returned as they are.
    """
    token_ids = tf.cast(token_ids, tf.int64)
    kept = tf.ragged.boolean_mask(token_ids, token_ids >= len(SPECIAL_TOKENS))
    pieces = tf.strings.regex_replace(id_to_piece.lookup(kept), "^" + SUFFIX_INDICATOR, "")
    symbols = tf.strings.unicode_decode(tf.strings.reduce_join(pieces, axis=-1), "UTF-8")
    byte_of_symbol = [0] * 0x200
    for value, symbol in enumerate(byte_alphabet()):
        byte_of_symbol[ord(symbol)] = value
    byte_values = tf.gather(tf.constant(byte_of_symbol, tf.int32), symbols)
    byte_strings = tf.gather(tf.constant([bytes([value]) for value in range(256)]), byte_values)
    return tf.strings.reduce_join(byte_strings, axis=-1)
