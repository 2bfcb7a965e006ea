"""Runs the Trainer's run_fn in a fresh process, for tests/test_sharded_trainer.py.

    python tests/sharded_run.py <fn_args.json> <probe.npy> <gathered_logits.npy>

The FnArgs file is the TFJob launcher's (tfjob.fn_args_to_json). Nothing configures devices here:
with `training.sharding` set, run_fn itself splits the CPU into the mesh's logical devices, as in
any Trainer process started fresh. The one addition is a spy on `ShardedTrainer.exported_backbone`:
it keeps the real method's result (the gathered backbone that run_fn exports) and writes that
backbone's logits on the token ids in <probe.npy>, for the test to compare with the SavedModel's.
"""

import sys
import types

import numpy as np


def main(fn_args_path: str, probe_path: str, logits_path: str) -> None:
    from components.trainer.training import sharded_loop, tfjob
    from components.trainer.training.run_fn import run_fn

    real = sharded_loop.ShardedTrainer.exported_backbone

    def recording(self, *args, **kwargs):
        gathered = real(self, *args, **kwargs)
        np.save(logits_path, gathered(np.load(probe_path)).numpy())
        return gathered

    sharded_loop.ShardedTrainer.exported_backbone = recording
    with open(fn_args_path, encoding="utf-8") as handle:
        fields = tfjob.fn_args_from_json(handle.read())
    run_fn(types.SimpleNamespace(**fields))


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s", force=True)
    main(*sys.argv[1:4])
