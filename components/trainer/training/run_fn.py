"""The TFX Trainer entry point (`run_fn`): train the backbone and export the serving model.

`create_pipeline` passes the trainer's options in `custom_config`
(`options.trainer_custom_config`); this module parses them with the same typed classes, picks a
driver (drivers.py: replicated, parameter server or sharded; its strategy, precision, XLA setting
and loop) and a method (methods.py: continuation or instruction tuning; its batches), checks the
run (`plan_run`), builds, trains and exports.

With `model.checkpoint` (a Hugging Face checkpoint directory or URI), the architecture comes from
its config.json (`checkpoint.hf_config`) and the backbone starts from its weights
(`checkpoint.hf_weights`); a warm start or a resume point, when there is one, then overrides them.

Outputs in the Trainer's ModelRun artifact (`fn_args.model_run_dir`): `checkpoints/` (resume
points) and `train/` (TensorBoard summaries). The chief writes them and the exported model; other
workers of a multi-worker run write to temporary directories that are removed.

With `kubeflow.tfjob.enabled` the Trainer's own `run_fn` only launches a TFJob (`tfjob.launch`)
whose replicas run this same function through `replica.py`.
"""

import dataclasses
import hashlib
import logging
import os
from typing import TYPE_CHECKING, NamedTuple, Optional, Tuple

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras

from components.tokenizer import loaded
from components.trainer.checkpoint.fingerprint import checkpoint_sha256
from components.trainer.checkpoint.hf_config import (
    CheckpointConfig,
    check_vocabulary,
    checkpoint_model_options,
    read_config,
)
from components.trainer.checkpoint.hf_weights import load_weights
from components.trainer.model import lora
from components.trainer.model.dtype_policy import keras_policy
from components.trainer.model.model_size import parameter_count, training_flops_per_token
from components.trainer.options import ModelOptions, TrainerSettings, TrainingOptions, read_trainer_custom_config
from components.trainer.serving.export_process import BackboneRecipe, Exporter, resolve_export_process
from components.trainer.training import drivers, methods, packing, record, tfjob
from components.trainer.training.hardware import measure_matmul_flops
from components.trainer.training.loop import LoopSettings
from components.trainer.training.precision import accelerator_kind
from components.trainer.training.strategy import cleanup_worker_dir, is_chief, resolve_distribution, writable_dir
from components.trainer.training.warm_start import warm_start_from

if TYPE_CHECKING:  # importing TFX is slow and a TFJob replica only needs FnArgs' attributes
    from tfx.components.trainer.fn_args_utils import FnArgs


def _peak_flops(training: TrainingOptions, policy_name: str) -> float:
    if training.peak_flops:
        return training.peak_flops
    dtype = {"mixed_bfloat16": tf.bfloat16, "mixed_float16": tf.float16}.get(policy_name, tf.float32)
    return measure_matmul_flops(dtype)


def _launched_as_tfjob(fn_args: "FnArgs", settings: TrainerSettings) -> bool:
    """With `kubeflow.tfjob.enabled`, runs the training as a TFJob (see tfjob.py) and returns True.

    Inside a TFJob replica (or when disabled) returns False, and this process trains itself.
    """
    if not settings.tfjob.enabled or tfjob.running_in_replica():
        return False
    # One TFJob per Trainer execution: the model run directory is unique to the execution.
    job_name = "textgen-train-" + hashlib.sha1(fn_args.model_run_dir.encode("utf-8")).hexdigest()[:12]
    tfjob.launch(fn_args, settings.tfjob, settings.tfjob.image, settings.tfjob_namespace, job_name)
    return True


def _warm_start(backbone, settings: TrainerSettings, tokenizer_sha256: str) -> Optional[dict]:
    """Warm-starts `backbone` from the registry's production model when there is one whose
    tokenizer and weights fit (warm_start.py); returns which model it started from (for the
    training record), or None.

    Looked up at run time (no ML Metadata resolver), the same way on every runner; the pipeline
    passes where the registry is in the settings.
    """
    from components.registry.model_registry import find_production_model

    production = find_production_model(settings.registry, settings.model_name, settings.registry_dir or None)
    if production is None:
        logging.info("Not warm-starting: no model is registered as production yet")
        return None
    logging.info(
        "Warm start: production model is registered version %d (%s)",
        production.registered_version,
        production.saved_model_dir,
    )
    if not warm_start_from(backbone, production.saved_model_dir, tokenizer_sha256):
        return None
    return {"saved_model_dir": production.saved_model_dir, "registered_version": production.registered_version}


def resolve_model(model_config: ModelOptions, vocab_size: int) -> Tuple[ModelOptions, Optional[CheckpointConfig]]:
    """The model options to build, and the Hugging Face checkpoint to initialise from (None without
    `model.checkpoint`); its vocabulary must be the run tokenizer's `vocab_size`."""
    if not model_config.checkpoint:
        return model_config, None
    checkpoint = read_config(model_config.checkpoint)
    check_vocabulary(checkpoint, vocab_size)
    return checkpoint_model_options(model_config, checkpoint), checkpoint


def _count(variables) -> int:
    return sum(int(variable.shape.num_elements()) for variable in variables)


def _export_base_model(backbone, exporter: Exporter, model_uri: str, strategy) -> None:
    """Exports the imported checkpoint, before any training step, beside the model it is
    fine-tuned into (`record.base_model_path`): the Evaluator's first baseline. A retried execution
    that already exported it does not export again (its weights may have been restored trained)."""
    base_dir = record.base_model_path(model_uri)
    if tf.io.gfile.exists(os.path.join(base_dir, "saved_model.pb")):
        return
    export_dir = writable_dir(base_dir, strategy)
    exporter.write(backbone, export_dir)
    cleanup_worker_dir(export_dir, strategy)
    logging.info("Exported the base checkpoint (the Evaluator's first baseline) to %s", base_dir)


def _hugging_face_dir(
    checkpoint: Optional[CheckpointConfig], tokenizer: loaded.LoadedTokenizer, model_uri: str, strategy
) -> Optional[str]:
    """Where this task writes the Hugging Face export: None without a checkpoint, on a worker that is
    not the chief, or when the run tokenizes with its own learned tokenizer (`tokenizer.policy`)."""
    if not checkpoint or not is_chief(strategy):
        return None
    if tokenizer.kind == loaded.LEARNED_SENTENCEPIECE:
        logging.info(
            "Not writing a Hugging Face export: the run tokenizes with its own %s tokenizer, not the checkpoint's",
            tokenizer.kind,
        )
        return None
    return record.hugging_face_path(model_uri)


def _chat_record(tokenizer: loaded.LoadedTokenizer) -> Optional[dict]:
    """What the training record (and so the model card) says of the chat template, or None."""
    chat = tokenizer.chat()
    if chat is None:
        return None
    return {
        "template": chat.template,
        "template_sha256": chat.template_sha256,
        "end_of_turn_tokens": chat.grammar.end_of_turn_tokens(),
        "stop_token_ids": list(chat.stop_token_ids),
    }


class RunPlan(NamedTuple):
    """What one Trainer execution trains and how, decided before any variable is built."""

    tokenizer: loaded.LoadedTokenizer
    model: ModelOptions  # the checkpoint's architecture when there is one
    checkpoint: Optional[CheckpointConfig]
    method: methods.ContinuationMethod
    packing_stats: Optional[packing.PackingStats]
    device: str
    policy_name: str
    loop: LoopSettings
    model_uri: str  # the Model artifact (its serving directory is Format-Serving)


def _global_batch(training: TrainingOptions, context_length: int, strategy) -> int:
    """The global batch, which must split evenly over the replicas and then into micro-batches."""
    global_batch = training.resolved_batch_size(context_length)
    replicas = strategy.num_replicas_in_sync
    per_replica = global_batch // replicas
    if per_replica * replicas != global_batch or per_replica % training.gradient_accumulation_steps:
        raise ValueError(
            f"the global batch ({global_batch}) must split evenly over {replicas} replicas "
            f"and then into {training.gradient_accumulation_steps} micro-batches"
        )
    return global_batch


def plan_run(fn_args: "FnArgs", settings: TrainerSettings, driver: drivers.ReplicatedDriver) -> RunPlan:
    """Reads the transform output and the checkpoint, picks the method and checks that the driver
    can train it on this data with these settings; every refusal happens here, before building."""
    training = settings.training
    feature_spec = tft.TFTransformOutput(fn_args.transform_output).transformed_feature_spec()
    tokenizer = loaded.load(loaded.transform_graph_dir(fn_args.transform_output))
    model, checkpoint = resolve_model(settings.model, tokenizer.vocab_size)
    method = methods.choose_method(feature_spec, model.context_length, tokenizer)
    driver.accepts(method)
    packing_stats = method.check_data(fn_args.train_files, training)
    device = accelerator_kind(driver.strategy)
    policy_name = driver.precision(training, device)
    driver.check(training, policy_name)
    jit_compile, xla_fallback = driver.jit_compile(training, device, policy_name)
    loop = LoopSettings(
        total_steps=training.train_steps,
        global_batch_size=_global_batch(training, model.context_length, driver.strategy),
        context_length=model.context_length,
        accumulation=training.gradient_accumulation_steps,
        steps_per_call=training.steps_per_call,
        log_every=training.log_every,
        checkpoint_every=training.checkpoint_every,
        eval_batches=training.eval_batches,
        clip_norm=training.clip_norm,
        keep_best=training.keep_best_eval,
        early_stopping_patience=training.early_stopping_patience,
        jit_compile=jit_compile,
        xla_fallback=xla_fallback,
        flops_per_token=training_flops_per_token(model, tokenizer.vocab_size, weight_gradients=not training.lora.rank),
        peak_flops=_peak_flops(training, policy_name),
    )
    model_uri = os.path.dirname(fn_args.serving_model_dir.rstrip("/"))
    return RunPlan(tokenizer, model, checkpoint, method, packing_stats, device, policy_name, loop, model_uri)


def _log_plan(plan: RunPlan, training: TrainingOptions) -> None:
    vocab_size = plan.tokenizer.vocab_size
    source = f"checkpoint {plan.model.checkpoint}" if plan.checkpoint else f"{plan.model.preset} preset"
    logging.info(
        "Model: %s, %s parameters, %.3f GFLOPs per trained token; vocabulary %d",
        source,
        f"{parameter_count(plan.model, vocab_size):,}",
        plan.loop.flops_per_token / 1e9,
        vocab_size,
    )
    logging.info(
        "Training %d steps of %d x %d tokens (%d micro-batch(es)) on %s, %s, XLA %s, recompute %s, peak %.1f GFLOP/s",
        training.train_steps,
        plan.loop.global_batch_size,
        plan.loop.context_length,
        plan.loop.accumulation,
        plan.device,
        plan.policy_name,
        "on" if plan.loop.jit_compile else "off",
        training.recompute,
        plan.loop.peak_flops / 1e9,
    )


def _exporter(fn_args: "FnArgs", settings: TrainerSettings, plan: RunPlan, driver, backbone) -> Tuple[Exporter, str]:
    """The exporter of this run, and where its exports run (`training.export_process`)."""
    training, vocab_size = settings.training, plan.tokenizer.vocab_size
    export_process = resolve_export_process(
        training.export_process,
        resolve_distribution(training.distribution, training.tpu),
        driver.sharded,
        parameter_count(plan.model, vocab_size),
    )
    recipe = (
        BackboneRecipe(
            plan.model.model_dump(),
            vocab_size,
            training.lora.model_dump(),
            training.recompute,
            backbone.frozen_dtype,
            plan.policy_name,
        )
        if export_process == "child"
        else None
    )
    logging.info("Exports run %s", "in a child process" if recipe else "in the Trainer's process")
    return Exporter(fn_args.transform_output, settings.generation.model_dump(), recipe), export_process


def _initial_weights(
    backbone, exporter: Exporter, plan: RunPlan, settings: TrainerSettings, strategy
) -> Optional[dict]:
    """Loads the checkpoint (exporting it as the first baseline), freezes all but the LoRA adapters
    and warm-starts from production when asked; returns which model it warm-started from, or None."""
    training = settings.training
    if plan.checkpoint:
        load_weights(backbone, plan.model.checkpoint, plan.checkpoint)
        _export_base_model(backbone, exporter, plan.model_uri, strategy)
    if training.lora.rank:
        lora.freeze_all_but_adapters(backbone)
        logging.info(
            "LoRA: rank %d, alpha %g on %s; training %s of %s parameters; frozen weights stored as %s",
            training.lora.rank,
            training.lora.alpha,
            ", ".join(training.lora.targets),
            f"{_count(backbone.trainable_variables):,}",
            f"{_count(backbone.variables):,}",
            backbone.frozen_dtype or "float32",
        )
    return _warm_start(backbone, settings, plan.tokenizer.sha256) if training.warm_start else None


def _train(fn_args: "FnArgs", training: TrainingOptions, plan: RunPlan, driver, backbone, optimizer):
    """Runs the driver's loop on the method's batches; returns (trainer, steps run, step reports)."""

    def train_batches(start_step: int) -> tf.data.Dataset:
        seed = driver.shuffle_seed(training, start_step)
        return plan.method.batches(fn_args.train_files, plan.loop.global_batch_size, training, seed, shuffle=True)

    def eval_batches() -> tf.data.Dataset:
        return plan.method.batches(fn_args.eval_files, plan.loop.global_batch_size, training, None, shuffle=False)

    run_dirs = dict(
        checkpoint_dir=os.path.join(fn_args.model_run_dir, "checkpoints"),
        summary_dir=os.path.join(fn_args.model_run_dir, "train"),
    )
    trainer, train_iterator, eval_iterator = driver.trainer(
        backbone, optimizer, plan.loop, run_dirs, train_batches, eval_batches
    )
    reports = []
    steps_run = trainer.train(train_iterator, eval_iterator, on_report=reports.append)
    return trainer, steps_run, reports


def _export(fn_args: "FnArgs", plan: RunPlan, exporter: Exporter, backbone, strategy) -> None:
    """Writes the serving model (and, fine-tuning a checkpoint, its Hugging Face export)."""
    export_dir = writable_dir(fn_args.serving_model_dir, strategy)
    hf_dir = _hugging_face_dir(plan.checkpoint, plan.tokenizer, plan.model_uri, strategy)
    exporter.write(backbone, export_dir, plan.model.checkpoint if hf_dir else None, hf_dir)
    cleanup_worker_dir(export_dir, strategy)
    if hf_dir:
        logging.info("Exported the fine-tuned model in the Hugging Face layout to %s", hf_dir)


def _training_record(plan: RunPlan, training: TrainingOptions, trainer, steps_run: int, reports, **extra):
    vocab_size = plan.tokenizer.vocab_size
    return record.TrainingRecord(
        model=plan.model.model_dump(),
        training=training.model_dump(),
        vocab_size=vocab_size,
        parameters=parameter_count(plan.model, vocab_size),
        tokenizer_sha256=plan.tokenizer.sha256,
        device=plan.device,
        precision=plan.policy_name,
        xla=plan.loop.jit_compile,
        steps_run=steps_run,
        last_step=dataclasses.asdict(reports[-1]) if reports else None,
        exported_step=trainer.best_step_restored or trainer.step,
        base_checkpoint={"source": plan.model.checkpoint, "sha256": checkpoint_sha256(plan.model.checkpoint)}
        if plan.checkpoint
        else None,
        packing=plan.packing_stats.to_dict() if plan.packing_stats else None,
        chat=_chat_record(plan.tokenizer),
        **extra,
    )


def run_fn(fn_args: "FnArgs") -> None:
    """Trains to `training.train_steps` steps (resuming from a checkpoint) and exports the SavedModel."""
    settings = read_trainer_custom_config(fn_args.custom_config)
    if _launched_as_tfjob(fn_args, settings):
        return
    training = settings.training
    driver = drivers.choose_driver(training, settings.model)  # before TensorFlow runs any op
    keras.utils.set_random_seed(training.seed)
    plan = plan_run(fn_args, settings, driver)
    _log_plan(plan, training)
    with keras_policy(plan.policy_name):
        with driver.strategy.scope():
            backbone, optimizer = driver.build(plan.model, plan.tokenizer.vocab_size, training, plan.policy_name)
        exporter, export_process = _exporter(fn_args, settings, plan, driver, backbone)
        warm_started = _initial_weights(backbone, exporter, plan, settings, driver.strategy)
        trainer, steps_run, reports = _train(fn_args, training, plan, driver, backbone, optimizer)
        backbone = driver.exported_backbone(trainer, backbone, plan.model, plan.tokenizer.vocab_size)
        _export(fn_args, plan, exporter, backbone, driver.strategy)
    if is_chief(driver.strategy):
        record.write(
            plan.model_uri,
            _training_record(
                plan, training, trainer, steps_run, reports, warm_start=warm_started, export_process=export_process
            ),
        )
    logging.info("Exported the serving model to %s", fn_args.serving_model_dir)
