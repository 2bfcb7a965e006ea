"""BPE merges inside a TF graph, in the order Hugging Face `tokenizers` applies them.

`tokenizers` merges a word one pair at a time: of the adjacent pairs the merge list knows, the one
with the lowest rank, the leftmost among equals, until none is left. `MergeTable.merge` gives the
same result for all words of a batch at once, in rounds of a `tf.while_loop`. In a round each word
takes the pair of lowest rank r it has and merges its occurrences left to right (in a run x x x of
one symbol, the first two first), stopping after the first occurrence whose merge makes a pair of
rank below r with a neighbour as it stands at that moment (the earlier occurrences merged, the
later ones not): `tokenizers` would merge that pair next, before the remaining occurrences, and
the next round does. Merging occurrences that make no such pair in one round changes nothing,
since r stays the lowest rank and the leftmost of them is always next.

In a merge list that only uses tokens made by earlier merges (every list `tokenizers` learns), a
merge never makes a pair of lower rank, so a round merges every occurrence. SentencePiece merge
lists converted to tokenizer.json list every split of a piece, whose parts can be pieces made
later; there a round stops early where that happens.

Merge ranks are looked up by binary search in a sorted constant of pair keys, so the graph holds
no table resources and works in TF Transform and in a SavedModel alike.
"""

from typing import Dict, Sequence, Tuple

import numpy as np
import tensorflow as tf

NO_RANK = np.iinfo(np.int64).max


class MergeTable(tf.Module):
    """The merge list of a vocabulary as graph constants, and the merge loop over it."""

    def __init__(
        self, merges: Sequence[Tuple[str, str]], vocab: Dict[str, int], size: int, source: str, name: str = "merges"
    ):
        """`merges` in rank order; `vocab` token -> id; `size`: one more than the largest id."""
        super().__init__(name=name)
        self._size = size
        keys, merged = [], []
        for rank, (left, right) in enumerate(merges):
            for part in (left, right, left + right):
                if part not in vocab:
                    raise ValueError(
                        f"{source}: merge {rank} ({left} {right}) uses {part!r}, which is not in the vocabulary"
                    )
            keys.append(vocab[left] * size + vocab[right])
            merged.append(vocab[left + right])
        if len(set(keys)) != len(keys):
            raise ValueError(f"{source}: the merge list has the same pair twice")
        order = np.argsort(np.asarray(keys, np.int64), kind="stable")
        sorted_keys = np.asarray(keys, np.int64)[order] if keys else np.zeros([0], np.int64)
        self._pair_keys = tf.constant(np.append(sorted_keys, NO_RANK), tf.int64)  # sentinel: never empty
        self._pair_ranks = tf.constant(np.append(order, NO_RANK).astype(np.int64), tf.int64)
        merged_sorted = np.asarray(merged, np.int64)[order] if keys else np.zeros([0], np.int64)
        self._pair_merged = tf.constant(np.append(merged_sorted, -1).astype(np.int64), tf.int64)

    def _lookup(self, left: tf.Tensor, right: tf.Tensor, valid: tf.Tensor):
        """(rank, merged id) of each pair (left, right) where `valid`; NO_RANK where unknown or not valid."""
        keys = left * self._size + right
        slot = tf.searchsorted(self._pair_keys, keys, side="left", out_type=tf.int64)
        known = tf.equal(tf.gather(self._pair_keys, slot), keys) & valid
        return tf.where(known, tf.gather(self._pair_ranks, slot), NO_RANK), tf.gather(self._pair_merged, slot)

    def merge(self, symbols: tf.Tensor, word_of_symbol: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """Flat int64 `symbols`, each with the (non-decreasing) index of its word -> the merged
        symbols and their word indices (see the module docstring)."""

        def not_done(symbols, word_of_symbol, merged_any):
            return merged_any

        def one_round(symbols, word_of_symbol, merged_any):
            same_word = tf.equal(word_of_symbol[:-1], word_of_symbol[1:])  # [pairs]
            ranks, merged = self._lookup(symbols[:-1], symbols[1:], same_word)
            pair_word = word_of_symbol[:-1]
            num_segments = tf.reduce_max(tf.concat([word_of_symbol, [0]], axis=0)) + 1
            lowest = tf.gather(tf.math.unsorted_segment_min(ranks, pair_word, num_segments), pair_word)
            chosen = tf.equal(ranks, lowest) & (ranks < NO_RANK)
            # Occurrences of one pair overlap only as runs of equal symbols (x x x): keep every second.
            position = tf.range(tf.shape(chosen, out_type=tf.int64)[0])
            run = tf.cumsum(tf.cast(tf.logical_not(chosen), tf.int64))
            num_runs = tf.reduce_max(tf.concat([run, [0]], axis=0)) + 1
            run_start = tf.math.unsorted_segment_min(tf.where(chosen, position, NO_RANK), run, num_runs)
            chosen &= tf.equal((position - tf.gather(run_start, run)) % 2, 0)
            # The neighbours of each occurrence's merged symbol when it is merged: on the left the
            # symbol before it (or the earlier occurrence's merged symbol), on the right the symbol after.
            no_symbol = tf.constant([-1], tf.int64)
            before = tf.concat([no_symbol, symbols], axis=0)[:-2]
            before_merged = tf.concat([no_symbol, no_symbol, merged], axis=0)[:-2]
            before_chosen = tf.concat([[False, False], chosen], axis=0)[:-2]
            left = tf.where(before_chosen, before_merged, before)
            left_valid = tf.concat([[False], same_word], axis=0)[:-1]
            right = tf.concat([symbols, no_symbol], axis=0)[2:]
            right_valid = tf.concat([same_word, [False]], axis=0)[1:]
            left_rank, _ = self._lookup(left, merged, left_valid)
            right_rank, _ = self._lookup(merged, right, right_valid)
            cascades = chosen & ((left_rank < lowest) | (right_rank < lowest))
            first_cascade = tf.math.unsorted_segment_min(tf.where(cascades, position, NO_RANK), pair_word, num_segments)
            chosen &= position <= tf.gather(first_cascade, pair_word)
            new_symbols = tf.concat([tf.where(chosen, merged, symbols[:-1]), symbols[-1:]], axis=0)
            keep = tf.logical_not(tf.concat([[False], chosen], axis=0))
            return tf.boolean_mask(new_symbols, keep), tf.boolean_mask(word_of_symbol, keep), tf.reduce_any(chosen)

        symbols, word_of_symbol, _ = tf.while_loop(
            not_done,
            one_round,
            (symbols, word_of_symbol, tf.size(symbols) > 1),
            shape_invariants=(tf.TensorShape([None]), tf.TensorShape([None]), tf.TensorShape([])),
        )
        return symbols, word_of_symbol
