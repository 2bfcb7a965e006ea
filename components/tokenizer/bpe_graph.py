"""Byte-level BPE (GPT-2, SmolLM, Llama 3) inside a TF graph, on core TF ops and TF Text's regex split.

Tokenizing follows Hugging Face `tokenizers` step by step, and gives the same ids:

1. Words. GPT-2's pre-tokenizer expression (byte_level.py) ends in `\\s+(?!\\S)|\\s+`, which RE2
   cannot express. Its effect on a maximal whitespace run W of n characters is: at the end of the
   text, W is one word; before other text, W[:n-1] is a word (when n > 1) and the last character
   either joins the next word (a space: ' ?\\p{L}+' and its siblings take it) or is a word of
   its own (any other whitespace). So the text is first cut into whitespace runs and the text
   between them (`regex_split`), the runs are cut as just said with string ops, a space that
   joins the next piece is prepended to it, and each piece is then split with the expression's
   other alternatives, which need no lookahead. With a `Digits` pre-tokenizer before the ByteLevel
   one, the text is first cut into digits (or digit runs) and the rest, and each piece goes
   through this step as a text of its own, as `tokenizers` runs pre-tokenizers in sequence.
   Llama 3's expression treats line breaks apart; `_split_llama3` says how its runs are cut.
2. Bytes. Each word's UTF-8 bytes become the ids of their one-character tokens (byte_level.py).
3. Merges, in `tokenizers`' order (lowest rank first, leftmost first among equals), for all
   words of the batch at once (bpe_merges.py, shared with the SentencePiece-style BPE).
   With `ignore_merges` (Llama 3), a word that is itself a token is that token (a binary search
   over fingerprints of the tokens' bytes, checked against the bytes).

Special tokens (such as <|endoftext|>) are never produced from text: a literal "<|endoftext|>"
in a document is tokenized as the characters it is made of. This is `tokenizers` with
`encode_special_tokens=True`; we choose it so that raw data and prompts cannot inject the
document separator or the stop token. Detokenizing drops special tokens and turns bytes that
are not valid UTF-8 into U+FFFD, as `tokenizers`' ByteLevel decoder does.
"""

from typing import Dict, Iterable, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from components.tokenizer import bpe_merges, byte_level

_NO_RANK = bpe_merges.NO_RANK


# TF Text's regex split stops reading a string at its first NUL character. NUL is spelled as two
# other characters of its class (neither letter, digit nor space), which the expression keeps in
# one word just as it would keep NUL: NUL -> U+FFFF U+FFFE, and U+FFFF itself -> U+FFFF U+FFFF.
_ESCAPE, _NUL_MARK = 0xFFFF, 0xFFFE
_HASH_BUCKETS = 1 << 62


def _escape_nul(texts: tf.Tensor) -> tf.Tensor:
    doubled = tf.strings.regex_replace(texts, "\\x{FFFF}", chr(_ESCAPE) * 2)
    return tf.strings.regex_replace(doubled, "\\x00", chr(_ESCAPE) + chr(_NUL_MARK))


def _unescape_nul(words: tf.Tensor) -> tf.Tensor:
    """The inverse of `_escape_nul` on the words it was split into (escape pairs never straddle
    words, since both characters are of one class). In a run of k escapes, pairs of escapes are
    one U+FFFF each; when k is odd, the last escape and the U+FFFE after it are a NUL."""
    chars = tf.strings.unicode_decode(words, "UTF-8")
    flat = tf.cast(chars.flat_values, tf.int64)
    position = tf.range(tf.size(flat, out_type=tf.int64))
    is_escape = tf.equal(flat, _ESCAPE)
    run = tf.cumsum(tf.cast(tf.logical_not(is_escape), tf.int64))
    num_runs = tf.reduce_max(tf.concat([run, [0]], axis=0)) + 1
    no_position = tf.size(flat, out_type=tf.int64)
    run_start = tf.math.unsorted_segment_min(tf.where(is_escape, position, no_position), run, num_runs)
    run_length = tf.math.unsorted_segment_sum(tf.cast(is_escape, tf.int64), run, num_runs)
    offset = position - tf.gather(run_start, run)
    odd_last = is_escape & tf.equal(offset, tf.gather(run_length, run) - 1) & tf.equal(offset % 2, 0)
    keep = tf.logical_not(is_escape) | (tf.equal(offset % 2, 0) & tf.logical_not(odd_last))
    becomes_nul = tf.concat([[False], odd_last[:-1]], axis=0) & tf.equal(flat, _NUL_MARK)
    flat = tf.where(becomes_nul, tf.zeros_like(flat), flat)
    unescaped = tf.ragged.boolean_mask(chars.with_flat_values(flat), chars.with_flat_values(keep))
    return tf.strings.unicode_encode(tf.cast(unescaped, tf.int32), "UTF-8")


class ByteLevelBpeGraph(tf.Module):
    """Text <-> token ids with a byte-level BPE vocabulary and merge list (see module docstring)."""

    def __init__(
        self,
        vocab: Dict[str, int],
        merges: Sequence[Tuple[str, str]],
        special_ids: Iterable[int],
        source: str = "byte-level BPE",
        name: str = "byte_level_bpe",
        digits: str = "",
        expression: str = byte_level.GPT2_PATTERN,
        ignore_merges: bool = False,
    ):
        """`digits`: the expression of a `Digits` pre-tokenizer that runs before GPT-2's ('' for none;
        byte_level.DIGIT or DIGITS): its pieces are pre-tokenized as separate texts, as `tokenizers` does.
        `expression`: the pre-tokenizer's, GPT2_PATTERN or LLAMA3_PATTERN. `ignore_merges`: a word
        that is a token of the vocabulary is that token, whatever the merges would make of it."""
        super().__init__(name=name)
        if expression not in (byte_level.GPT2_PATTERN, byte_level.LLAMA3_PATTERN):
            raise ValueError(f"{source}: unsupported pre-tokenizer expression {expression!r}")
        self._digits = digits
        self._llama3 = expression == byte_level.LLAMA3_PATTERN
        self._ignore_merges = ignore_merges
        size = max(vocab.values()) + 1
        self._size = size
        chars = byte_level.byte_to_char()
        missing = [char for char in chars if char not in vocab]
        if missing:
            raise ValueError(
                f"{source}: the vocabulary lacks {len(missing)} of the 256 byte tokens "
                f"(e.g. {missing[0]!r}): not a byte-level BPE vocabulary"
            )
        self._byte_ids = tf.constant([vocab[char] for char in chars], tf.int64)
        self._merges = bpe_merges.MergeTable(merges, vocab, size, source)
        # Decoding: each id's characters, mapped back to bytes; special tokens decode to nothing.
        texts = [""] * size
        special = set(special_ids)
        to_byte = byte_level.char_to_byte()
        for token, index in vocab.items():
            if index not in special:
                if any(char not in to_byte for char in token):
                    raise ValueError(f"{source}: token {token!r} (id {index}) is not made of byte characters")
                texts[index] = bytes(to_byte[char] for char in token)
        self._id_bytes = tf.constant(texts, tf.string)
        if ignore_merges:  # whole-word lookup: sorted 62-bit fingerprints of each token's bytes
            with tf.init_scope():  # eager even while a graph (Transform's) is being traced
                prints = tf.strings.to_hash_bucket_fast(tf.constant(texts, tf.string), _HASH_BUCKETS).numpy()
            prints[[index for index, text in enumerate(texts) if not text]] = _NO_RANK  # nothing maps to ""
            order = np.argsort(prints, kind="stable")
            self._word_prints = tf.constant(np.append(prints[order], _NO_RANK), tf.int64)
            self._word_ids = tf.constant(np.append(order, 0).astype(np.int64), tf.int64)

    def tokenize(self, texts: tf.Tensor, starts_input=None) -> tf.RaggedTensor:
        """[batch] strings -> ragged [batch, (tokens)] int64 ids. `starts_input` (whether each text
        begins the input or follows a special token; sentencepiece_bpe_graph.py) changes nothing:
        the ByteLevel pre-tokenizer treats every text between special tokens alike."""
        del starts_input
        texts = tf.reshape(texts, [-1])
        words = self._words(texts)  # [batch, (words)]
        word_bytes = tf.strings.unicode_decode(words.flat_values, "ISO-8859-1")  # each byte as a code point
        symbols = tf.gather(self._byte_ids, tf.cast(word_bytes.flat_values, tf.int64))
        word_of_symbol = word_bytes.value_rowids()
        symbols, word_of_symbol = self._merges.merge(symbols, word_of_symbol)
        num_words = tf.shape(words.flat_values, out_type=tf.int64)[0]
        per_word = tf.RaggedTensor.from_value_rowids(symbols, word_of_symbol, nrows=num_words)
        if self._ignore_merges:
            per_word = self._whole_words(words.flat_values, per_word)
        return tf.RaggedTensor.from_row_splits(per_word, words.row_splits).merge_dims(1, 2)

    def _whole_words(self, words: tf.Tensor, per_word: tf.RaggedTensor) -> tf.RaggedTensor:
        """`per_word` with each word that is itself a token replaced by that token."""
        prints = tf.strings.to_hash_bucket_fast(words, _HASH_BUCKETS)
        slot = tf.searchsorted(self._word_prints, prints, side="left", out_type=tf.int64)
        token = tf.gather(self._word_ids, slot)
        found = tf.equal(tf.gather(self._word_prints, slot), prints) & tf.equal(tf.gather(self._id_bytes, token), words)
        whole = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(token, found), tf.cast(found, tf.int64))
        merged = tf.ragged.boolean_mask(
            per_word, per_word.with_flat_values(tf.gather(tf.logical_not(found), per_word.value_rowids()))
        )
        return tf.concat([whole, merged], axis=1)

    def _words(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """The pre-tokenizer: [batch] texts -> ragged [batch, (words)] (step 1 of the module docstring)."""
        escaped = _escape_nul(texts)
        if self._digits:
            parts = tf_text.regex_split(escaped, self._digits, self._digits)
            words = tf.RaggedTensor.from_row_splits(self._split(parts.flat_values), parts.row_splits).merge_dims(1, 2)
        else:
            words = self._split(escaped)
        return words.with_flat_values(
            tf.cond(
                tf.reduce_any(tf.not_equal(escaped, texts)),
                lambda: _unescape_nul(words.flat_values),
                lambda: words.flat_values,
            )
        )

    def _split(self, texts: tf.Tensor) -> tf.RaggedTensor:
        if self._llama3:
            return self._split_llama3(texts)
        pieces = tf_text.regex_split(texts, byte_level.WHITESPACE_RUN, byte_level.WHITESPACE_RUN)
        flat = pieces.flat_values
        count = tf.shape(flat, out_type=tf.int64)[0]
        index = tf.range(count)
        has_next = index < tf.gather(pieces.row_splits[1:], pieces.value_rowids()) - 1
        is_run = tf.strings.regex_full_match(flat, byte_level.WHITESPACE_RUN)
        length = tf.strings.length(flat, unit="UTF8_CHAR")
        last = tf.strings.substr(flat, length - 1, tf.ones_like(length), unit="UTF8_CHAR")
        head = tf.strings.substr(flat, tf.zeros_like(length), length - 1, unit="UTF8_CHAR")
        cut = is_run & has_next  # a run before more text: W[:n-1], then its last character
        gives_space = cut & tf.equal(last, " ")
        takes_space = tf.concat([[False], gives_space[:-1]], axis=0)
        first = tf.where(cut, head, tf.where(takes_space, tf.strings.join([" ", flat]), flat))
        first_kept = tf.logical_not(cut) | (length > 1)
        second_kept = cut & tf.logical_not(gives_space)
        items = tf.boolean_mask(tf.stack([first, last], axis=1), tf.stack([first_kept, second_kept], axis=1))
        items_per_piece = tf.cast(first_kept, tf.int64) + tf.cast(second_kept, tf.int64)
        items_per_text = tf.math.unsorted_segment_sum(items_per_piece, pieces.value_rowids(), pieces.nrows())
        words = tf_text.regex_split(items, byte_level.GPT2_WORD, byte_level.GPT2_WORD)  # [items, (words)]
        return tf.RaggedTensor.from_row_lengths(words, items_per_text).merge_dims(1, 2)

    def _split_llama3(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Llama 3's pre-tokenizer. A whitespace run W splits into A, through its last line break,
        and R, the rest. A (which no lookahead concerns: a line break follows every space in it) is
        appended to the text before it, where Llama 3's expression lets a punctuation run take its
        first line breaks; at the start of a text it is a piece of its own. R before more text is
        R[:-1] (`\\s+(?!\\S)`) and its last character, which is prepended to the next text and
        left to the expression to join or not; R at the end of a text is one word."""
        pieces = tf_text.regex_split(texts, byte_level.WHITESPACE_RUN, byte_level.WHITESPACE_RUN)
        flat = pieces.flat_values
        rows = pieces.value_rowids()
        index = tf.range(tf.shape(flat, out_type=tf.int64)[0])
        row_start = tf.gather(pieces.row_splits[:-1], rows)
        has_next = index < tf.gather(pieces.row_splits[1:], rows) - 1
        has_previous = index > row_start
        is_run = tf.strings.regex_full_match(flat, byte_level.WHITESPACE_RUN)
        breaks = tf.where(is_run, tf.strings.regex_replace(flat, "[^\\r\\n]*$", ""), "")  # A
        rest = tf.where(is_run, tf.strings.regex_replace(flat, "(?s)^.*[\\r\\n]", ""), "")  # R
        length = tf.strings.length(rest, unit="UTF8_CHAR")
        last = tf.strings.substr(rest, tf.maximum(length - 1, 0), tf.minimum(length, 1), unit="UTF8_CHAR")
        head = tf.strings.substr(rest, tf.zeros_like(length), tf.maximum(length - 1, 0), unit="UTF8_CHAR")
        before_text = tf.concat([[""], last[:-1]], axis=0)  # run i-1's last character, for text piece i
        after_text = tf.concat([breaks[1:], [""]], axis=0)  # run i+1's A, for text piece i
        text_item = tf.strings.join([tf.where(has_previous, before_text, ""), flat, tf.where(has_next, after_text, "")])
        first = tf.where(is_run, tf.where(has_previous, "", breaks), text_item)
        second = tf.where(is_run, tf.where(has_next, head, rest), "")
        first_kept = tf.not_equal(first, "")
        second_kept = tf.not_equal(second, "")
        items = tf.boolean_mask(tf.stack([first, second], axis=1), tf.stack([first_kept, second_kept], axis=1))
        items_per_piece = tf.cast(first_kept, tf.int64) + tf.cast(second_kept, tf.int64)
        items_per_text = tf.math.unsorted_segment_sum(items_per_piece, rows, pieces.nrows())
        words = tf_text.regex_split(items, byte_level.LLAMA3_WORD, byte_level.LLAMA3_WORD)
        return tf.RaggedTensor.from_row_lengths(words, items_per_text).merge_dims(1, 2)

    def detokenize(self, token_ids) -> tf.Tensor:
        """Ragged [batch, (tokens)] ids -> [batch] UTF-8 strings (invalid UTF-8 becomes U+FFFD)."""
        if not isinstance(token_ids, tf.RaggedTensor):
            token_ids = tf.RaggedTensor.from_tensor(token_ids)
        pieces = tf.gather(self._id_bytes, tf.clip_by_value(tf.cast(token_ids, tf.int64), 0, self._size - 1))
        joined = tf.strings.reduce_join(pieces, axis=1)
        return tf.strings.unicode_transcode(joined, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
