"""Runs the Trainer's real `run_fn` in its own process, as a TFX Trainer pod would.

Used by the multi-worker, mirrored and kill-and-resume tests:
    python tests/trainer_process.py ARGS_JSON [--logical-cpus N]
ARGS_JSON holds the FnArgs fields run_fn reads (transform_output, train_files, eval_files,
model_run_dir, serving_model_dir, base_model, custom_config). TF_CONFIG, when set, makes the
process one task of a multi-worker cluster. Importing TFX is not needed (and costs a minute).
"""
import argparse
import json
import logging
import os
import sys
import types

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("args_json")
    parser.add_argument("--logical-cpus", type=int, default=0)
    options = parser.parse_args()
    import tensorflow as tf

    if options.logical_cpus > 1:
        (cpu,) = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * options.logical_cpus)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s", force=True)
    from components.trainer.run_fn import run_fn

    with open(options.args_json, encoding="utf-8") as handle:
        fields = json.load(handle)
    fields.setdefault("base_model", None)
    run_fn(types.SimpleNamespace(**fields))


if __name__ == "__main__":
    main()
