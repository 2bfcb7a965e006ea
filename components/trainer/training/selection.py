"""Model selection on the eval split: keep the weights with the lowest eval loss, stop when it stalls.

A model trained for a fixed number of steps on a small corpus memorises it: its train loss keeps
falling while its eval loss turns and climbs (400 speeches of Shakespeare, 57 KB: eval loss 7.05
at step 60, 10.76 at step 300), and the Evaluator then rightly refuses it. `EvalSelection` watches
the eval loss the loop measures at each progress line (always on the same first eval batches, so
two measurements compare like with like) and:

- writes the trainable weights to `<checkpoint_dir>/best/` whenever the eval loss improves, and at
  the end of training puts them back when a later step did worse (`keep_best`);
- stops training after `patience` measurements in a row without improvement (0: never).

Its state (best loss, its step, measurements without improvement) is part of the loop's
checkpoint, so a restarted trainer carries on with the same selection. Only trainable variables
are written: with LoRA that is the adapters, with full training the whole model, once per
improving measurement (raise `training.log_every` or turn `keep_best` off when that is too much
I/O for a large model).
"""

import logging
import math
import os
from typing import Optional

import tensorflow as tf

BEST_SUBDIR = "best"


class EvalSelection:
    """Tracks the best eval loss of a run; see the module docstring."""

    def __init__(self, trainable_variables: list, keep_best: bool, patience: int, min_delta: float = 0.0):
        self.keep_best = keep_best
        self.patience = patience
        self.min_delta = min_delta
        self.best_loss = tf.Variable(math.inf, trainable=False, dtype=tf.float32, name="best_eval_loss")
        self.best_step = tf.Variable(-1, trainable=False, dtype=tf.int64, name="best_eval_step")
        self.stale = tf.Variable(0, trainable=False, dtype=tf.int64, name="evals_without_improvement")
        self._weights = tf.train.Checkpoint(trainable=list(trainable_variables))
        self._manager: Optional[tf.train.CheckpointManager] = None

    @property
    def enabled(self) -> bool:
        return self.keep_best or self.patience > 0

    def state(self) -> tf.train.Checkpoint:
        """The trackable state to save beside the model and optimizer."""
        return tf.train.Checkpoint(best_loss=self.best_loss, best_step=self.best_step, stale=self.stale)

    def attach(self, checkpoint_root: str) -> None:
        """Writes best weights under `checkpoint_root` (the chief's checkpoint dir or a worker's temp dir)."""
        if self.keep_best:
            self._manager = tf.train.CheckpointManager(
                self._weights, os.path.join(checkpoint_root, BEST_SUBDIR), max_to_keep=1
            )

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and int(self.stale.numpy()) >= self.patience

    def observe(self, step: int, eval_loss: Optional[float]) -> None:
        """Records the eval loss measured at `step`; saves the weights when it is the best so far."""
        if eval_loss is None or not math.isfinite(eval_loss):
            return
        if eval_loss < float(self.best_loss.numpy()) - self.min_delta:
            self.best_loss.assign(eval_loss)
            self.best_step.assign(step)
            self.stale.assign(0)
            if self._manager is not None:
                self._manager.save(checkpoint_number=step)
        else:
            self.stale.assign_add(1)
            if self.should_stop:
                logging.info(
                    "Stopping early at step %d: eval loss has not improved on %.4f (step %d) for %d "
                    "measurements (training.early_stopping_patience)",
                    step,
                    float(self.best_loss.numpy()),
                    int(self.best_step.numpy()),
                    self.patience,
                )

    def restore_best(self, final_step: int) -> Optional[int]:
        """Puts back the best weights when a later step did worse; returns the step restored (or None)."""
        best_step = int(self.best_step.numpy())
        if self._manager is None or best_step < 0 or best_step == final_step:
            return None
        latest = self._manager.latest_checkpoint
        if latest is None:
            logging.warning(
                "The best eval loss was at step %d but its weights are not in %s; keeping step %d's",
                best_step,
                self._manager.directory,
                final_step,
            )
            return None
        self._weights.restore(latest).assert_existing_objects_matched()
        logging.info(
            "Restored the weights of step %d (eval loss %.4f, the lowest measured; training ran to step %d)",
            best_step,
            float(self.best_loss.numpy()),
            final_step,
        )
        return best_step
