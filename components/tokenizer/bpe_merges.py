"""BPE merges inside a TF graph, in the order Hugging Face `tokenizers` applies them.

`tokenizers` merges a word one pair at a time: of the adjacent pairs the merge list knows, the one
with the lowest rank, the leftmost among equals, until none is left. `MergeTable.merge` does this
for all words of a batch at once in a `tf.while_loop`, one round per step:

- `all_occurrences` (merge lists in which a merge only uses tokens that are single symbols or made
  by earlier merges, as every list `tokenizers` learns): in a round each word merges every
  occurrence of its lowest-rank pair, left to right without overlap. A merge cannot make a pair
  of lower rank than its own, so this is the sequential order, in fewer rounds.
- otherwise (SentencePiece merge lists converted to tokenizer.json list every split of a piece,
  whose parts can be pieces made later): in a round each word merges only the leftmost
  occurrence of its lowest-rank pair, which is the sequential order itself.

`merges_need_one_at_a_time` tells the two lists apart. Merge ranks are looked up by binary search
in a sorted constant of pair keys, so the graph holds no table resources and works in TF
Transform and in a SavedModel alike.
"""
from typing import Dict, Sequence, Tuple

import numpy as np
import tensorflow as tf

NO_RANK = np.iinfo(np.int64).max


def merges_need_one_at_a_time(merges: Sequence[Tuple[str, str]], is_symbol) -> bool:
    """Whether some merge uses a token that is neither a single symbol (`is_symbol(token)`) nor
    made by an earlier merge (see the module docstring)."""
    made = set()
    for left, right in merges:
        if any(part not in made and not is_symbol(part) for part in (left, right)):
            return True
        made.add(left + right)
    return False


class MergeTable(tf.Module):
    """The merge list of a vocabulary as graph constants, and the merge loop over it."""

    def __init__(self, merges: Sequence[Tuple[str, str]], vocab: Dict[str, int], size: int, source: str,
                 all_occurrences: bool, name: str = "merges"):
        """`merges` in rank order; `vocab` token -> id; `size`: one more than the largest id."""
        super().__init__(name=name)
        self._size = size
        self._all_occurrences = all_occurrences
        keys, merged = [], []
        for rank, (left, right) in enumerate(merges):
            for part in (left, right, left + right):
                if part not in vocab:
                    raise ValueError(f"{source}: merge {rank} ({left} {right}) uses {part!r}, which is not in the vocabulary")
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

    def merge(self, symbols: tf.Tensor, word_of_symbol: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """Flat int64 `symbols`, each with the (non-decreasing) index of its word -> the merged
        symbols and their word indices."""

        def rank_of_pairs(symbols, word_of_symbol):
            keys = symbols[:-1] * self._size + symbols[1:]
            slot = tf.searchsorted(self._pair_keys, keys, side="left", out_type=tf.int64)
            known = tf.equal(tf.gather(self._pair_keys, slot), keys) & tf.equal(word_of_symbol[:-1], word_of_symbol[1:])
            return tf.where(known, tf.gather(self._pair_ranks, slot), NO_RANK), slot

        def not_done(symbols, word_of_symbol, merged_any):
            return merged_any

        def one_round(symbols, word_of_symbol, merged_any):
            ranks, slot = rank_of_pairs(symbols, word_of_symbol)
            pair_word = word_of_symbol[:-1]
            num_segments = tf.reduce_max(tf.concat([word_of_symbol, [0]], axis=0)) + 1
            lowest = tf.math.unsorted_segment_min(ranks, pair_word, num_segments)
            chosen = tf.equal(ranks, tf.gather(lowest, pair_word)) & (ranks < NO_RANK)
            position = tf.range(tf.shape(chosen, out_type=tf.int64)[0])
            if self._all_occurrences:
                # Occurrences of one pair overlap only as runs of equal symbols (x x x): keep every second.
                run = tf.cumsum(tf.cast(tf.logical_not(chosen), tf.int64))
                num_runs = tf.reduce_max(tf.concat([run, [0]], axis=0)) + 1
                run_start = tf.math.unsorted_segment_min(tf.where(chosen, position, NO_RANK), run, num_runs)
                chosen &= tf.equal((position - tf.gather(run_start, run)) % 2, 0)
            else:
                leftmost = tf.math.unsorted_segment_min(tf.where(chosen, position, NO_RANK), pair_word, num_segments)
                chosen &= tf.equal(position, tf.gather(leftmost, pair_word))
            merged = tf.where(chosen, tf.gather(self._pair_merged, slot), symbols[:-1])
            new_symbols = tf.concat([merged, symbols[-1:]], axis=0)
            keep = tf.logical_not(tf.concat([[False], chosen], axis=0))
            return tf.boolean_mask(new_symbols, keep), tf.boolean_mask(word_of_symbol, keep), tf.reduce_any(chosen)

        symbols, word_of_symbol, _ = tf.while_loop(
            not_done, one_round, (symbols, word_of_symbol, tf.size(symbols) > 1),
            shape_invariants=(tf.TensorShape([None]), tf.TensorShape([None]), tf.TensorShape([])))
        return symbols, word_of_symbol

