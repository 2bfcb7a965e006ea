"""Training methods: what the Trainer learns from its examples, and the batches that feed it.

- `continuation`: plain text; documents framed with the tokenizer's special tokens and packed into
  blocks, the loss on every token (data.py).
- `instruction`: conversations whose transformed examples carry a loss mask; packed into rows,
  the loss on the tokens `training.loss_on` names (packing.py).

`run_fn` picks the method from the transformed feature spec (`choose_method`) and hands its
batches to whichever driver runs the loop (drivers.py); a driver that cannot run a method says so
(`Driver.accepts`). A new method (preference tuning) is one more class here.
"""

import logging
from typing import Any, Dict, Optional

import tensorflow as tf

from components.tokenizer import loaded
from components.trainer.options import TrainingOptions
from components.trainer.training import data, packing


class ContinuationMethod:
    """Next-token prediction on plain text (see the module docstring)."""

    name = "continuation"
    conversational = False

    def __init__(self, feature_spec: Dict[str, Any], context_length: int, tokenizer: loaded.LoadedTokenizer):
        self.feature_spec = feature_spec
        self.context_length = context_length
        self.tokenizer = tokenizer

    def check_data(self, train_files, training: TrainingOptions) -> Optional[packing.PackingStats]:
        """Refuses a train split too small to train on (one block); nothing to report."""
        del training
        if not data.holds_one_block(train_files, self.feature_spec, self.context_length, self.tokenizer.special):
            raise ValueError(
                f"the train split {train_files} holds fewer than {self.context_length + 1} tokens "
                "(one training block): add data or lower model.context_length"
            )
        return None

    def batches(
        self, files, global_batch: int, training: TrainingOptions, seed: Optional[int], shuffle: bool
    ) -> tf.data.Dataset:
        """Repeated global batches of (inputs, targets), shuffled before packing when `shuffle`."""
        return data.packed_blocks(
            files,
            self.feature_spec,
            self.context_length,
            global_batch,
            shuffle_buffer=training.shuffle_buffer if shuffle else None,
            seed=seed,
            repeat=True,
            special=self.tokenizer.special,
        )


class InstructionMethod(ContinuationMethod):
    """Supervised fine-tuning on conversations: the loss on the replies (see the module docstring)."""

    name = "instruction"
    conversational = True

    def check_data(self, train_files, training: TrainingOptions) -> packing.PackingStats:
        """Refuses a train split without a reply token within the row; returns what packing keeps (logged)."""
        stats = packing.packing_stats(train_files, self.feature_spec, self.context_length)
        logging.info(
            "Conversations: %d in the train split, %d cut to the %d-token row, %d dropped with no reply token left "
            "after that (counted, not trained on); packed into %d rows: %.1f%% of row tokens are conversation, "
            "%.1f%% supervised (training.loss_on=%s)",
            stats.conversations,
            stats.truncated,
            stats.row_tokens,
            stats.dropped_without_supervised_tokens,
            stats.rows,
            100 * stats.real_fraction,
            100 * stats.supervised_fraction,
            training.loss_on,
        )
        if stats.rows == 0 or stats.supervised_tokens == 0:
            raise ValueError(
                f"the train split {train_files} has no conversation with a reply token within "
                f"model.context_length={self.context_length}: add data or raise model.context_length"
            )
        return stats

    def batches(
        self, files, global_batch: int, training: TrainingOptions, seed: Optional[int], shuffle: bool
    ) -> tf.data.Dataset:
        return packing.packed_batches(
            files,
            self.feature_spec,
            self.context_length,
            global_batch,
            shuffle_buffer=training.shuffle_buffer if shuffle else None,
            seed=seed,
            repeat=True,
            loss_on=training.loss_on,
        )


def choose_method(
    feature_spec: Dict[str, Any], context_length: int, tokenizer: loaded.LoadedTokenizer
) -> ContinuationMethod:
    """Instruction tuning when the transformed examples carry a loss mask, else continuation."""
    method = InstructionMethod if packing.has_loss_mask(feature_spec) else ContinuationMethod
    return method(feature_spec, context_length, tokenizer)
