"""The TFX Trainer entry point (`run_fn`): train the backbone and export the serving model.

`create_pipeline` passes the trainer's options in `custom_config`
(`options.trainer_custom_config`); this module parses them with the same typed classes, picks
the strategy, precision and XLA setting, and hands over to `loop.LanguageModelTrainer`.

With `model.checkpoint` (a Hugging Face checkpoint directory or URI), the architecture comes from
its config.json (`checkpoint.hf_config`) and the backbone starts from its weights
(`checkpoint.hf_weights`); a warm start or a resume point, when there is one, then overrides them.

Outputs in the Trainer's ModelRun artifact (`fn_args.model_run_dir`): `checkpoints/` (resume
points) and `train/` (TensorBoard summaries). The chief writes them and the exported model; other
workers of a multi-worker run write to temporary directories that are removed.

With `training.sharding` (a batch x model mesh of more than one device) the model is trained
sharded with DTensor over this host's devices instead of under a tf.distribute strategy
(`sharded_loop.py`), and the weights are gathered into an ordinary backbone for the same export.

With `kubeflow.tfjob.enabled` the Trainer's own `run_fn` only launches a TFJob (`tfjob.launch`)
whose replicas run this same function through `replica.py`.
"""

import dataclasses
import hashlib
import logging
import os
from typing import TYPE_CHECKING, Optional, Tuple

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
from components.trainer.checkpoint.hf_weights import load_weights, stored_weight_dtypes
from components.trainer.model import lora
from components.trainer.model.backbone import build_backbone
from components.trainer.model.dtype_policy import keras_policy
from components.trainer.model.model_size import parameter_count, training_flops_per_token
from components.trainer.options import (
    ModelOptions,
    TrainerSettings,
    TrainingOptions,
    check_sharding,
    read_trainer_custom_config,
)
from components.trainer.serving.export_process import BackboneRecipe, Exporter, resolve_export_process
from components.trainer.training import data, packing, record, sharded_loop, tfjob
from components.trainer.training.hardware import measure_matmul_flops
from components.trainer.training.loop import LanguageModelTrainer, LoopSettings
from components.trainer.training.optimizer import make_optimizer
from components.trainer.training.precision import (
    accelerator_kind,
    frozen_weight_dtype,
    resolve_jit_compile,
    resolve_precision,
)
from components.trainer.training.ps_loop import ParameterServerTrainer, check_parameter_server_settings
from components.trainer.training.strategy import (
    choose_strategy,
    cleanup_worker_dir,
    is_chief,
    resolve_distribution,
    writable_dir,
)
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


def _check_training_data(
    train_files,
    feature_spec,
    context_length: int,
    tokenizer: loaded.LoadedTokenizer,
    conversational: bool,
    training: TrainingOptions,
) -> Optional[packing.PackingStats]:
    """Refuses a train split too small to train on; for conversations also the loops that do not
    pack them (sharded, parameter server), and returns what packing keeps (logged)."""
    if not conversational:
        if not data.holds_one_block(train_files, feature_spec, context_length, tokenizer.special):
            raise ValueError(
                f"the train split {train_files} holds fewer than {context_length + 1} tokens "
                "(one training block): add data or lower model.context_length"
            )
        return None
    if training.sharding.enabled:
        raise ValueError(
            "conversation data trains with the ordinary loop only: training.sharding does not pack conversations yet"
        )
    stats = packing.packing_stats(train_files, feature_spec, context_length)
    logging.info(
        "Conversations: %d in the train split, %d cut to the %d-token row, %d dropped with no reply token left after "
        "that (counted, not trained on); packed into %d rows: %.1f%% of row tokens are conversation, %.1f%% supervised "
        "(training.loss_on=%s)",
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
            f"model.context_length={context_length}: add data or raise model.context_length"
        )
    return stats


def run_fn(fn_args: "FnArgs") -> None:
    """Trains to `training.train_steps` steps (resuming from a checkpoint) and exports the SavedModel."""
    trainer_settings = read_trainer_custom_config(fn_args.custom_config)
    if _launched_as_tfjob(fn_args, trainer_settings):
        return
    model_config, training, generation = trainer_settings.model, trainer_settings.training, trainer_settings.generation
    sharded = training.sharding.enabled
    # First: MultiWorkerMirroredStrategy must configure collectives, and a sharded run on CPUs its
    # logical devices, before TensorFlow runs any op.
    if sharded:
        check_sharding(training, model_config)
        sharded_loop.check_single_client(training.distribution, training.tpu)
        mesh_device_type = sharded_loop.prepare_devices(training.sharding)
        strategy = tf.distribute.get_strategy()
    else:
        strategy = choose_strategy(training.distribution, training.tpu)
    keras.utils.set_random_seed(training.seed)
    transform_output = tft.TFTransformOutput(fn_args.transform_output)
    feature_spec = transform_output.transformed_feature_spec()
    tokenizer = loaded.load(loaded.transform_graph_dir(fn_args.transform_output))
    vocab_size = tokenizer.vocab_size
    model_config, checkpoint = resolve_model(model_config, vocab_size)
    model_uri = os.path.dirname(
        fn_args.serving_model_dir.rstrip("/")
    )  # the Model artifact (serving dir is Format-Serving)
    context_length = model_config.context_length
    conversational = packing.has_loss_mask(feature_spec)
    packing_stats = _check_training_data(
        fn_args.train_files, feature_spec, context_length, tokenizer, conversational, training
    )

    device = accelerator_kind(strategy)
    policy_name = (
        sharded_loop.resolve_sharded_precision(training.precision)
        if sharded
        else resolve_precision(training.precision, device)
    )
    parameter_server = isinstance(strategy, tf.distribute.ParameterServerStrategy)
    if parameter_server:
        check_parameter_server_settings(policy_name, training.jit_compile)
        if conversational:
            raise ValueError(
                "conversation data trains with the ordinary loop only: a parameter-server cluster "
                "(TF_CONFIG with ps tasks) does not pack conversations yet"
            )
    global_batch = training.resolved_batch_size(context_length)
    per_replica_batch = global_batch // strategy.num_replicas_in_sync
    if (
        per_replica_batch * strategy.num_replicas_in_sync != global_batch
        or per_replica_batch % training.gradient_accumulation_steps
    ):
        raise ValueError(
            f"the global batch ({global_batch}) must split evenly over {strategy.num_replicas_in_sync} replicas "
            f"and then into {training.gradient_accumulation_steps} micro-batches"
        )
    settings = LoopSettings(
        total_steps=training.train_steps,
        global_batch_size=global_batch,
        context_length=context_length,
        accumulation=training.gradient_accumulation_steps,
        steps_per_call=training.steps_per_call,
        log_every=training.log_every,
        checkpoint_every=training.checkpoint_every,
        eval_batches=training.eval_batches,
        clip_norm=training.clip_norm,
        keep_best=training.keep_best_eval,
        early_stopping_patience=training.early_stopping_patience,
        # auto falls back to graph mode where XLA cannot compile the step (precision.py), but not
        # across workers: a failed step aborts MultiWorkerMirroredStrategy's collectives, so there
        # the error names the setting instead.
        # XLA cannot read the variables on ps tasks (ps_loop.py): graph mode there.
        # Nor under sharding (sharding.py): auto means off there.
        jit_compile=resolve_jit_compile(training.jit_compile, device, policy_name, training.recompute)
        and not parameter_server
        and not sharded,
        xla_fallback=training.jit_compile == "auto"
        and not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        and not parameter_server
        and not sharded,
        flops_per_token=training_flops_per_token(model_config, vocab_size, weight_gradients=not training.lora.rank),
        peak_flops=_peak_flops(training, policy_name),
    )
    model_source = f"checkpoint {model_config.checkpoint}" if checkpoint else f"{model_config.preset} preset"
    logging.info(
        "Model: %s, %s parameters, %.3f GFLOPs per trained token; vocabulary %d",
        model_source,
        f"{parameter_count(model_config, vocab_size):,}",
        settings.flops_per_token / 1e9,
        vocab_size,
    )
    logging.info(
        "Training %d steps of %d x %d tokens (%d micro-batch(es)) on %s, %s, XLA %s, recompute %s, peak %.1f GFLOP/s",
        training.train_steps,
        global_batch,
        context_length,
        settings.accumulation,
        device,
        policy_name,
        "on" if settings.jit_compile else "off",
        training.recompute,
        settings.peak_flops / 1e9,
    )

    def train_batches(start_step: int) -> tf.data.Dataset:
        # A resumed run reshuffles with a step-dependent seed rather than replaying the stream;
        # parameter-server workers shuffle unseeded, each in its own order (ps_loop.py).
        seed = None if parameter_server else training.seed + start_step
        if conversational:
            return packing.packed_batches(
                fn_args.train_files,
                feature_spec,
                context_length,
                global_batch,
                shuffle_buffer=training.shuffle_buffer,
                seed=seed,
                repeat=True,
                loss_on=training.loss_on,
            )
        return data.packed_blocks(
            fn_args.train_files,
            feature_spec,
            context_length,
            global_batch,
            shuffle_buffer=training.shuffle_buffer,
            seed=seed,
            repeat=True,
            special=tokenizer.special,
        )

    def eval_batches() -> tf.data.Dataset:
        if conversational:
            return packing.packed_batches(
                fn_args.eval_files, feature_spec, context_length, global_batch, repeat=True, loss_on=training.loss_on
            )
        return data.packed_blocks(
            fn_args.eval_files, feature_spec, context_length, global_batch, repeat=True, special=tokenizer.special
        )

    with keras_policy(policy_name):
        with strategy.scope():
            if sharded:
                mesh, backbone, optimizer = sharded_loop.build(
                    model_config, vocab_size, training, policy_name, mesh_device_type
                )
            else:
                # Not on parameter servers: their variables' placement is not tested with mixed dtypes.
                stored = stored_weight_dtypes(model_config.checkpoint) if checkpoint else frozenset()
                frozen_dtype = (
                    None
                    if parameter_server
                    else frozen_weight_dtype(training.lora, policy_name, stored, training.warm_start)
                )
                backbone = build_backbone(model_config, vocab_size, training.lora, training.recompute, frozen_dtype)
                optimizer = make_optimizer(training, policy_name)
        export_process = resolve_export_process(
            training.export_process,
            resolve_distribution(training.distribution, training.tpu),
            sharded,
            parameter_count(model_config, vocab_size),
        )
        recipe = (
            BackboneRecipe(
                model_config.model_dump(),
                vocab_size,
                training.lora.model_dump(),
                training.recompute,
                backbone.frozen_dtype,
                policy_name,
            )
            if export_process == "child"
            else None
        )
        logging.info("Exports run %s", "in a child process" if recipe else "in the Trainer's process")
        exporter = Exporter(fn_args.transform_output, generation.model_dump(), recipe)
        if checkpoint:
            load_weights(backbone, model_config.checkpoint, checkpoint)
            _export_base_model(backbone, exporter, model_uri, strategy)
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
        warm_started = _warm_start(backbone, trainer_settings, tokenizer.sha256) if training.warm_start else None
        run_dirs = dict(
            checkpoint_dir=os.path.join(fn_args.model_run_dir, "checkpoints"),
            summary_dir=os.path.join(fn_args.model_run_dir, "train"),
        )
        if sharded:  # ordinary global batches: the sharded trainer packs them into DTensors
            trainer = sharded_loop.ShardedTrainer(backbone, optimizer, mesh, settings, **run_dirs)
            make_train_iterator = lambda start: iter(train_batches(start))
            make_eval_iterator = lambda: iter(eval_batches())
        elif parameter_server:
            trainer = ParameterServerTrainer(backbone, optimizer, strategy, settings, **run_dirs)
            make_train_iterator = lambda start: trainer.per_worker_iterator(lambda: train_batches(start))
            make_eval_iterator = lambda: trainer.per_worker_iterator(eval_batches)
        else:
            trainer = LanguageModelTrainer(backbone, optimizer, strategy, settings, **run_dirs)
            make_train_iterator = lambda start: iter(
                data.distributed_blocks(strategy, lambda: train_batches(start), global_batch)
            )
            make_eval_iterator = lambda: iter(data.distributed_blocks(strategy, eval_batches, global_batch))
        reports = []
        steps_run = trainer.train(make_train_iterator, make_eval_iterator, on_report=reports.append)
        if sharded:
            backbone = trainer.exported_backbone(model_config, vocab_size)
        export_dir = writable_dir(fn_args.serving_model_dir, strategy)
        hf_dir = _hugging_face_dir(checkpoint, tokenizer, model_uri, strategy)
        exporter.write(backbone, export_dir, model_config.checkpoint if hf_dir else None, hf_dir)
        cleanup_worker_dir(export_dir, strategy)
        if hf_dir:
            logging.info("Exported the fine-tuned model in the Hugging Face layout to %s", hf_dir)
    if is_chief(strategy):
        record.write(
            model_uri,
            record.TrainingRecord(
                model=model_config.model_dump(),
                training=training.model_dump(),
                vocab_size=vocab_size,
                parameters=parameter_count(model_config, vocab_size),
                tokenizer_sha256=tokenizer.sha256,
                device=device,
                precision=policy_name,
                xla=settings.jit_compile,
                steps_run=steps_run,
                last_step=dataclasses.asdict(reports[-1]) if reports else None,
                exported_step=trainer.best_step_restored or trainer.step,
                base_checkpoint={
                    "source": model_config.checkpoint,
                    "sha256": checkpoint_sha256(model_config.checkpoint),
                }
                if checkpoint
                else None,
                packing=packing_stats.to_dict() if packing_stats else None,
                chat=_chat_record(tokenizer),
                warm_start=warm_started,
                export_process=export_process,
            ),
        )
    logging.info("Exported the serving model to %s", fn_args.serving_model_dir)
