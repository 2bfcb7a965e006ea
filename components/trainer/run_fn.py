"""The TFX Trainer entry point (`run_fn`): train the backbone and export the serving model.

`create_pipeline` passes the model, training and generation config sections in
`custom_config`; this module rebuilds them with the same typed classes the CLI validated.
"""
import logging

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from tfx.components.trainer.fn_args_utils import FnArgs

from components.trainer import data, export, task
from components.trainer.backbone import build_backbone
from components.trainer.strategy import choose_strategy
from components.transform import tokenizer
from pipeline.config import GenerationConfig, ModelConfig, TrainingConfig

_EVAL_BATCHES = 8  # validation batches per progress line; the Evaluator measures the full split


def run_fn(fn_args: FnArgs) -> None:
    """Trains for `training.train_steps` steps and writes the SavedModel to `serving_model_dir`."""
    model_config = ModelConfig(**fn_args.custom_config["model"])
    training = TrainingConfig(**fn_args.custom_config["training"])
    generation = GenerationConfig(**fn_args.custom_config["generation"])
    keras.utils.set_random_seed(training.seed)
    transform_output = tft.TFTransformOutput(fn_args.transform_output)

    feature_spec = transform_output.transformed_feature_spec()
    train_blocks = data.packed_blocks(
        fn_args.train_files,
        feature_spec,
        model_config.context_length,
        training.batch_size,
        shuffle_buffer=training.shuffle_buffer,
        seed=training.seed,
        repeat=True,
    )
    if not data.holds_one_block(fn_args.train_files, feature_spec, model_config.context_length):
        raise ValueError(
            f"the train split {fn_args.train_files} holds fewer than {model_config.context_length + 1} tokens "
            "(one training block): add data or lower model.context_length"
        )
    eval_blocks = data.packed_blocks(fn_args.eval_files, feature_spec, model_config.context_length, training.batch_size)

    vocab_size = transform_output.vocabulary_size_by_name(tokenizer.VOCABULARY_ASSET_NAME)
    strategy = choose_strategy()
    with strategy.scope():
        backbone = build_backbone(model_config, vocab_size)
        task.compile_for_language_modelling(backbone, training)
    logging.info(
        "Training a %d-parameter model (vocabulary %d) for %d steps of %d x %d tokens with %s",
        backbone.count_params(), vocab_size, training.train_steps, training.batch_size, model_config.context_length,
        type(strategy).__name__,
    )

    epochs, steps_per_epoch = task.log_intervals(training.train_steps)
    backbone.fit(
        train_blocks,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        validation_data=eval_blocks.take(_EVAL_BATCHES),
        callbacks=[
            task.ThroughputLogger(training.batch_size * model_config.context_length),
            keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch"),
        ],
        verbose=2,
    )
    export.export_serving_model(backbone, transform_output, generation, fn_args.serving_model_dir)
    logging.info("Exported the serving model to %s", fn_args.serving_model_dir)
