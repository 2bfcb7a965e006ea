"""Sharded (DTensor) training against one device: loss trajectory, per-device memory, step time.

For each mesh, a backbone is built sharded (training/sharding.py), gathered into an ordinary
single-device copy with the same initial weights, and both train the same steps on the same
random token batch every step (same global batch): the sharded one with DTensor, the copy with the
ordinary AdamW as the Trainer does today. Reported per mesh, as one JSON object:
  losses / reference_losses      the two loss trajectories
  bytes_per_device               weights + optimizer state each mesh device holds (from DTensor's
                                 per-device components), and reference_bytes on the one device
  step_seconds / reference_step_seconds   median step time after the first (tracing) step
  gathered_logits_max_diff       the gathered model's logits against the sharded model's

Without GPUs the mesh is made of logical CPU devices (one process, shared cores), so the step
times there measure overhead, not speed-up. Example (tiny, about a minute here):
  PYTHONPATH=$PWD TF_USE_LEGACY_KERAS=1 python benchmarks/sharding.py --mesh 1x4 --mesh 2x2 --steps 4
"""

import argparse
import json
import statistics
import time

import numpy as np


def parse_mesh(text: str) -> tuple:
    """'BxM' -> (batch, model)."""
    batch, model = text.lower().split("x")
    return int(batch), int(model)


def run_mesh(batch: int, model: int, args) -> dict:
    """Trains sharded and single-device copies on one mesh; returns the numbers described above."""
    from tensorflow.experimental import dtensor

    from components.trainer.options import ModelOptions, ShardingOptions, TrainingOptions
    from components.trainer.training import sharding
    from components.trainer.training.optimizer import make_optimizer

    config = ModelOptions(
        preset=args.preset,
        num_layers=args.layers,
        num_heads=args.heads,
        model_dim=args.model_dim,
        mlp_dim=args.mlp_dim,
        context_length=args.length,
        mlp=args.mlp,
        position_encoding=args.positions,
        norm=args.norm,
    )
    training = TrainingOptions(train_steps=args.steps + 10, warmup_steps=1, learning_rate=args.learning_rate)
    options = ShardingOptions(batch=batch, model=model)
    sharding.check_shardable(config, options)
    mesh = sharding.make_mesh(options)
    sharded = sharding.build_sharded_backbone(config, args.vocab, mesh)
    reference = sharding.gather_backbone(sharded, config, args.vocab)
    sharded_optimizer = make_optimizer(training, "float32", mesh=mesh)
    reference_optimizer = make_optimizer(training, "float32")
    runs = {
        "": sharding.ShardedTrainStep(
            sharded, sharded_optimizer, args.batch_size, args.length, training.clip_norm, mesh
        ),
        "reference_": sharding.ShardedTrainStep(
            reference, reference_optimizer, args.batch_size, args.length, training.clip_norm
        ),
    }
    result = {"mesh": f"batch={batch},model={model}", "losses": [], "reference_losses": []}
    times = {"": [], "reference_": []}
    rng = np.random.default_rng(args.seed)
    # One batch, every step: the loss falls steadily, so a wrong update shows in the trajectory.
    tokens = rng.integers(0, args.vocab, size=(args.batch_size, args.length + 1))
    for _ in range(args.steps):
        for prefix, step in runs.items():
            start = time.perf_counter()
            loss, _ = step(tokens[:, :-1], tokens[:, 1:])
            times[prefix].append(time.perf_counter() - start)
            result[prefix + "losses"].append(loss)
    for prefix, measured in times.items():
        result[prefix + "step_seconds"] = statistics.median(measured[1:]) if len(measured) > 1 else measured[0]
    result["bytes_per_device"] = sharding.bytes_per_device(sharded.weights + sharded_optimizer.variables)
    result["reference_bytes"] = int(
        sum(v.shape.num_elements() * v.dtype.size for v in reference.weights + reference_optimizer.variables)
    )
    gathered = sharding.gather_backbone(sharded, config, args.vocab)
    probe = rng.integers(0, args.vocab, size=(args.batch_size, args.length))
    result["gathered_logits_max_diff"] = sharding.gathered_logits_difference(sharded, gathered, mesh, probe)
    result["gathered_is_ordinary"] = not any(isinstance(v, dtensor.DVariable) for v in gathered.weights)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mesh", action="append", help="BxM: batch x model devices (repeatable); default 1x4")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--model-dim", type=int, default=32)
    parser.add_argument("--mlp-dim", type=int, default=64)
    parser.add_argument("--mlp", default="gelu", choices=["gelu", "gelu_tanh", "swiglu"])
    parser.add_argument("--positions", default="learned", choices=["learned", "rotary"])
    parser.add_argument("--norm", default="layer", choices=["layer", "rms"])
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument(
        "--batch-size", type=int, default=4, help="Sequences per global batch (the same for both runs)."
    )
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    meshes = [parse_mesh(text) for text in (args.mesh or ["1x4"])]

    from components.trainer.training import sharding

    sharding.use_logical_cpu_devices(max(batch * model for batch, model in meshes))
    print(json.dumps([run_mesh(batch, model, args) for batch, model in meshes]))


if __name__ == "__main__":
    main()
