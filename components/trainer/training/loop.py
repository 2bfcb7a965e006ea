"""The training loop: compiled, distributed, checkpointed steps with progress and summaries.

One optimizer step = `accumulation` micro-batches per replica, each a forward/backward pass
(XLA-compiled when `jit_compile`; `_run_train_steps` handles a step XLA cannot compile), gradients
summed over micro-batches and all-reduced over replicas, clipped by global norm, then one AdamW
update. The loss is the sum of token losses divided by the tokens of the global batch, so the
update does not depend on how the batch is split over replicas and micro-batches. `steps_per_call` steps run inside one tf.function call.

Fault tolerance: a checkpoint (model + optimizer, whose `iterations` is the step) is written every
`checkpoint_every` steps and at the end; `train` restores the latest one first, so a restarted
trainer continues where the last checkpoint left off and stops at `total_steps`.

Model selection (selection.py): each progress line measures the eval loss on the same first eval
batches; the weights of the lowest one are kept and put back at the end, and training stops early
when it stops improving (`keep_best`, `early_stopping_patience`).
"""

import dataclasses
import logging
import time
from typing import Callable, Optional

import tensorflow as tf
import tf_keras as keras

from components.trainer.training.hardware import peak_memory
from components.trainer.training.selection import EvalSelection
from components.trainer.training.strategy import cleanup_worker_dir, is_chief, writable_dir


class XlaCompileError(RuntimeError):
    """The XLA-compiled train step uses an operation XLA's backend for this device cannot emit."""


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """What the loop needs besides the model, optimizer and data."""

    total_steps: int
    global_batch_size: int
    context_length: int
    accumulation: int = 1
    steps_per_call: int = 1
    log_every: int = 50
    checkpoint_every: int = 100
    eval_batches: int = 0
    clip_norm: float = 1.0
    jit_compile: bool = True
    # With `jit_compile`: when XLA's backend cannot compile the step, train in graph mode instead
    # (training.jit_compile=auto) rather than fail (=on).
    xla_fallback: bool = False
    flops_per_token: float = 0.0
    peak_flops: float = 0.0
    # Model selection on the eval split (selection.py): put back the weights of the lowest eval
    # loss at the end, and stop after this many measurements without improvement (0: never).
    keep_best: bool = False
    early_stopping_patience: int = 0

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.context_length


@dataclasses.dataclass
class StepReport:
    """One progress line's numbers (also written as TensorBoard scalars)."""

    step: int
    loss: float
    learning_rate: float
    gradient_norm: float
    tokens_per_sec: float
    mfu: float
    eval_loss: Optional[float]
    eta_seconds: float
    step_seconds: float = 0.0
    peak_memory_bytes: float = 0.0  # device memory on an accelerator, process RSS on a CPU

    def line(self, total_steps: int) -> str:
        eval_part = f" eval_loss {self.eval_loss:.4f}" if self.eval_loss is not None else ""
        return (
            f"step {self.step}/{total_steps} loss {self.loss:.4f}{eval_part} lr {self.learning_rate:.2e} "
            f"grad_norm {self.gradient_norm:.3f} {self.tokens_per_sec:,.0f} tokens/s MFU {self.mfu:.1%} "
            f"ETA {self.eta_seconds:.0f}s"
        )


def _token_loss_sum(model: keras.Model, inputs: tf.Tensor, targets: tf.Tensor, training: bool) -> tf.Tensor:
    logits = model(inputs, training=training)
    return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits))


def as_step_arguments(batch) -> tuple:
    """A dataset element as the arguments of a step: (inputs, targets) for text blocks, (batch,)
    for a dict of packed conversations (training/packing.py)."""
    return (batch,) if isinstance(batch, dict) else tuple(batch)


def loss_and_weight(model: keras.Model, batch, training: bool) -> tuple:
    """(summed token loss, summed target weights) of one batch: every target weighs 1 in text
    blocks ((inputs, targets)); packed conversations (a dict) weigh each target by its loss mask
    and attend within their own segments, at their own positions."""
    if not isinstance(batch, dict):
        inputs, targets = batch
        return _token_loss_sum(model, inputs, targets, training), tf.cast(tf.size(targets), tf.float32)
    logits = model(batch["inputs"], training=training, positions=batch["positions"], segment_ids=batch["segments"])
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["targets"], logits=logits)
    return tf.reduce_sum(losses * batch["weights"]), tf.reduce_sum(batch["weights"])


class LanguageModelTrainer:
    """Trains `model` with `optimizer` under `strategy` (create both inside `strategy.scope()`)."""

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        strategy: tf.distribute.Strategy,
        settings: LoopSettings,
        checkpoint_dir: str,
        summary_dir: Optional[str] = None,
    ):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self.settings = settings
        self.checkpoint_dir = checkpoint_dir
        self.summary_dir = summary_dir
        self._loss_scaled = isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)
        self._compile_train_steps(settings.jit_compile)
        self._eval_steps = tf.function(self._eval_steps_fn)
        with strategy.scope():
            optimizer.build(model.trainable_variables)
        self.selection = EvalSelection(
            model.trainable_variables,
            settings.keep_best and settings.eval_batches > 0,
            settings.early_stopping_patience if settings.eval_batches else 0,
        )
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, selection=self.selection.state())
        self.best_step_restored: Optional[int] = None

    def _compile_train_steps(self, jit_compile: bool) -> None:
        """(Re)creates the tf.functions of the train step, XLA-compiling the micro-batch pass when asked."""
        self.jit_compile = jit_compile
        self._compiled_gradients = tf.function(self._micro_batch_gradients, jit_compile=jit_compile)
        self._train_steps = tf.function(self._train_steps_fn)

    @property
    def step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    # --- the compiled parts -------------------------------------------------------------------
    def _micro_batch_gradients(self, batch) -> tuple:
        """Scaled loss, target weight and gradients of one micro-batch on one replica. The loss is
        divided by the global batch's token count; for weighted (packed conversation) batches
        `_replica_step` rescales to the global weight once it is known."""
        global_tokens = tf.cast(self.settings.tokens_per_step, tf.float32)
        with tf.GradientTape() as tape:
            loss_sum, weight = loss_and_weight(self.model, batch, training=True)
            loss = loss_sum / global_tokens
            taped_loss = self.optimizer.get_scaled_loss(loss) if self._loss_scaled else loss
        gradients = tape.gradient(taped_loss, self.model.trainable_variables)
        gradients = [tf.convert_to_tensor(gradient) for gradient in gradients]
        if self._loss_scaled:
            gradients = self.optimizer.get_unscaled_gradients(gradients)
        return loss, weight, gradients

    def _replica_step(self, *batch) -> tuple:
        """One optimizer step on this replica's share of the global batch (`as_step_arguments`)."""
        batch = batch[0] if len(batch) == 1 else batch
        weighted = isinstance(batch, dict)
        count = self.settings.accumulation
        if weighted:
            parts = {key: tf.split(tensor, count) for key, tensor in batch.items()}
            micro = [{key: split[index] for key, split in parts.items()} for index in range(count)]
        else:
            micro = list(zip(*(tf.split(tensor, count) for tensor in batch)))
        loss, weight, gradients = self._compiled_gradients(micro[0])
        for index in range(1, self.settings.accumulation):
            micro_loss, micro_weight, micro_gradients = self._compiled_gradients(micro[index])
            loss += micro_loss
            weight += micro_weight
            gradients = [total + part for total, part in zip(gradients, micro_gradients)]
        context = tf.distribute.get_replica_context()
        loss, weight, gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, [loss, weight, gradients])
        if weighted:  # from "per token of the batch" to "per weighted target of the batch"
            factor = tf.cast(self.settings.tokens_per_step, tf.float32) / tf.maximum(weight, 1.0)
            loss *= factor
            gradients = [gradient * tf.cast(factor, gradient.dtype) for gradient in gradients]
        gradient_norm = tf.linalg.global_norm(gradients)
        gradients, _ = tf.clip_by_global_norm(gradients, self.settings.clip_norm, use_norm=gradient_norm)
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables), skip_gradients_aggregation=True)
        return loss, gradient_norm

    def _train_steps_fn(self, iterator, num_steps: tf.Tensor) -> tuple:
        loss_total = tf.constant(0.0)
        gradient_norm = tf.constant(0.0)
        for _ in tf.range(num_steps):
            per_replica = self.strategy.run(self._replica_step, args=as_step_arguments(next(iterator)))
            loss, gradient_norm = (
                self.strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None) for value in per_replica
            )
            loss_total += loss
        return loss_total / tf.cast(num_steps, tf.float32), gradient_norm

    def _replica_eval(self, *batch) -> tuple:
        loss, weight = loss_and_weight(self.model, batch[0] if len(batch) == 1 else batch, training=False)
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, [loss, weight])

    def _eval_steps_fn(self, iterator, num_batches: tf.Tensor) -> tf.Tensor:
        """Mean loss per (weighted) target over `num_batches` global batches."""
        total, weight = tf.constant(0.0), tf.constant(0.0)
        for _ in tf.range(num_batches):
            loss, batch_weight = self.strategy.run(self._replica_eval, args=as_step_arguments(next(iterator)))
            total += self.strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)
            weight += self.strategy.reduce(tf.distribute.ReduceOp.MEAN, batch_weight, axis=None)
        return total / tf.maximum(weight, 1.0)

    # --- the Python driver --------------------------------------------------------------------
    def restore_latest(self) -> int:
        """Restores the newest checkpoint in `checkpoint_dir` (written by the chief); returns the step."""
        latest = tf.train.latest_checkpoint(self.checkpoint_dir)
        if latest:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
            logging.info("Resumed from checkpoint %s at step %d", latest, self.step)
        return self.step

    def _learning_rate(self) -> float:
        rate = self.optimizer.learning_rate
        if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
            rate = rate(self.optimizer.iterations)
        return float(tf.convert_to_tensor(rate).numpy())

    def train(
        self,
        make_train_iterator: Callable[[int], object],
        make_eval_iterator: Optional[Callable[[], object]] = None,
        on_report: Optional[Callable[[StepReport], None]] = None,
    ) -> int:
        """Runs until `total_steps`; `make_train_iterator(start_step)` builds the distributed input.

        Returns the number of steps run by this call (0 when a checkpoint already holds them all).
        With early stopping the run ends before `total_steps` (see selection.py); with `keep_best`
        the model holds the weights of the lowest eval loss afterwards (`best_step_restored`).
        """
        settings = self.settings
        start_step = self.restore_latest()
        checkpoint_root = writable_dir(self.checkpoint_dir, self.strategy)
        manager = tf.train.CheckpointManager(self.checkpoint, checkpoint_root, max_to_keep=2)
        self.selection.attach(checkpoint_root)
        writer = (
            tf.summary.create_file_writer(self.summary_dir)
            if self.summary_dir and is_chief(self.strategy)
            else tf.summary.create_noop_writer()
        )
        iterator = make_train_iterator(start_step)
        # Each measurement reads the same first eval batches, so successive eval losses compare.
        eval_iterators = make_eval_iterator if (make_eval_iterator and settings.eval_batches) else None
        interval_start, interval_step, run_start = time.perf_counter(), start_step, time.perf_counter()
        losses = []
        try:
            while self.step < settings.total_steps and not self.selection.should_stop:
                step = self.step
                boundary = min(
                    settings.total_steps,
                    (step // settings.log_every + 1) * settings.log_every,
                    (step // settings.checkpoint_every + 1) * settings.checkpoint_every,
                    step + self._round_steps(),
                )
                loss, gradient_norm = self._run_train_steps(iterator, boundary - step)
                losses.append((float(loss.numpy()), boundary - step))
                step = self.step
                if step % settings.log_every == 0 or step >= settings.total_steps:
                    elapsed = time.perf_counter() - interval_start
                    report = self._report(
                        step, losses, float(gradient_norm.numpy()), elapsed, step - interval_step, eval_iterators
                    )
                    self._write_summaries(writer, report)
                    logging.info("%s", report.line(settings.total_steps))
                    self.selection.observe(step, report.eval_loss)
                    if on_report:
                        on_report(report)
                    interval_start, interval_step, losses = time.perf_counter(), step, []
                # `>=`: a parameter-server step re-run after a worker failure can end past the total (ps_loop.py).
                if step % settings.checkpoint_every == 0 or step >= settings.total_steps or self.selection.should_stop:
                    manager.save(checkpoint_number=step)
            self.best_step_restored = self.selection.restore_best(self.step)
        finally:
            writer.close()
            cleanup_worker_dir(checkpoint_root, self.strategy)
        logging.info("Trained steps %d..%d in %.1fs", start_step, self.step, time.perf_counter() - run_start)
        return self.step - start_step

    def _round_steps(self) -> int:
        """The most steps run between two returns to the Python driver (one tf.function call here)."""
        return self.settings.steps_per_call

    def _run_train_steps(self, iterator, num_steps: int) -> tuple:
        """Runs `num_steps` compiled steps; returns their mean loss and the last gradient norm.

        XLA compiles the micro-batch pass when it first runs. A pass it cannot compile yields no
        gradients, so no weight or optimizer slot changes, but the optimizer's step counter does
        not wait for them and may already have advanced: it is put back. Then, with
        `xla_fallback`, the same steps run again in graph mode (the batch already taken from the
        shuffled stream is skipped); without it the error names the settings to change.
        """
        step_before = self.step
        try:
            return self._train_steps(iterator, tf.constant(num_steps))
        except tf.errors.UnimplementedError as error:
            if not self.jit_compile:
                raise
            self.optimizer.iterations.assign(step_before)
            reason = error.message.strip().splitlines()[0]
            if not self.settings.xla_fallback:
                raise XlaCompileError(
                    f"XLA could not compile the train step for this model and precision ({reason}); "
                    "set training.jit_compile=auto or off, or training.precision=float32"
                ) from error
            logging.warning("XLA could not compile the train step (%s); training in graph mode instead", reason)
            self._compile_train_steps(False)
            return self._train_steps(iterator, tf.constant(num_steps))

    def _report(
        self, step: int, losses: list, gradient_norm: float, elapsed: float, steps: int, eval_iterators
    ) -> StepReport:
        settings = self.settings
        tokens_per_sec = steps * settings.tokens_per_step / max(elapsed, 1e-9)
        mfu = tokens_per_sec * settings.flops_per_token / settings.peak_flops if settings.peak_flops else 0.0
        eval_loss = self._evaluate(eval_iterators()) if eval_iterators is not None else None
        weighted = sum(loss * count for loss, count in losses) / max(sum(count for _, count in losses), 1)
        return StepReport(
            step=step,
            loss=weighted,
            learning_rate=self._learning_rate(),
            gradient_norm=gradient_norm,
            tokens_per_sec=tokens_per_sec,
            mfu=mfu,
            eval_loss=eval_loss,
            eta_seconds=(settings.total_steps - step) * settings.tokens_per_step / max(tokens_per_sec, 1e-9),
            step_seconds=elapsed / max(steps, 1),
            peak_memory_bytes=peak_memory()[0],
        )

    def _evaluate(self, eval_iterator) -> float:
        """Mean token loss over `eval_batches` batches of the eval split."""
        return float(self._eval_steps(eval_iterator, tf.constant(self.settings.eval_batches)).numpy())

    @staticmethod
    def _write_summaries(writer, report: StepReport) -> None:
        with writer.as_default(step=report.step):
            tf.summary.scalar("loss", report.loss)
            tf.summary.scalar("learning_rate", report.learning_rate)
            tf.summary.scalar("gradient_norm", report.gradient_norm)
            tf.summary.scalar("tokens_per_sec", report.tokens_per_sec)
            tf.summary.scalar("mfu", report.mfu)
            tf.summary.scalar("step_seconds", report.step_seconds)
            tf.summary.scalar("peak_memory_gib", report.peak_memory_bytes / 2**30)
            if report.eval_loss is not None:
                tf.summary.scalar("eval_loss", report.eval_loss)
