"""The entry point of every TFJob replica: rebuild the Trainer's FnArgs and run `run_fn`.

The TFJob the launcher submits (`tfjob.py`) runs, in its chief and in each worker,

    python -m components.trainer.training.replica --fn-args <model_run_dir>/tfjob_fn_args.json

with `TF_CONFIG` set by the Training Operator (the cluster and this task) and
`TEXTGEN_TFJOB_REPLICA=1` (so `run_fn` trains instead of launching another TFJob). The
multi-worker and kill-and-resume tests start replicas with this same command.

In a parameter-server cluster (training.distribution=parameter_server, or auto with `ps` tasks
in TF_CONFIG) only the chief runs `run_fn`; a `worker` or `ps` replica runs a tf.distribute.Server
for the chief to use until the process is ended (`strategy.serve_parameter_server_task`), without
importing the Trainer's modules.

FnArgs is rebuilt as a plain namespace holding every field the launcher serialises
(`tfjob.FN_ARGS_FIELDS`, unset ones None): `run_fn` reads only those attributes, and a replica does
not need to import TFX for its FnArgs class.

`--logical-cpus N` splits the host CPU into N logical devices before TensorFlow starts, so
`training.distribution=mirrored` has N replicas on a machine without GPUs (the TFJob does not pass
it).
"""

import argparse
import logging
import sys
import types
from typing import List, Optional

from components.trainer.training import tfjob


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="Run the Trainer's run_fn inside a TFJob replica.")
    parser.add_argument("--fn-args", required=True, help="FnArgs JSON written by the launcher.")
    parser.add_argument(
        "--logical-cpus",
        type=int,
        default=0,
        help="Split the CPU into this many logical devices (MirroredStrategy without GPUs).",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s", force=True)
    import tensorflow as tf

    if args.logical_cpus > 1:
        (cpu,) = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.logical_cpus)
    # Imported after the device configuration, which must come before TensorFlow's runtime starts.
    from components import filesystems
    from components.trainer.options import read_trainer_custom_config
    from components.trainer.training import strategy

    filesystems.register()  # the FnArgs file and every URI in it may be on s3://
    with tf.io.gfile.GFile(args.fn_args) as handle:
        fields = tfjob.fn_args_from_json(handle.read())
    training = read_trainer_custom_config(fields["custom_config"] or {}).training
    if strategy.parameter_server_role(training.distribution):
        strategy.serve_parameter_server_task()
    from components.trainer.training.run_fn import run_fn

    run_fn(types.SimpleNamespace(**fields))


if __name__ == "__main__":
    from components.filesystems import exit_process

    main()
    exit_process(0)
