"""The Trainer's exports (serving SavedModel, Hugging Face layout) run in a child process for large models.

Why: TensorFlow does not give back what an export allocates. Measured on the 1.1B Llama shape
(bf16 frozen weights, LoRA; benchmarks/README.md "What each stage costs"): each
`export_serving_model` call leaves about 4.8 GiB resident after its serving copy (float32,
4 bytes a parameter, `weights.serving_backbone`) is garbage-collected and `malloc_trim` has run,
and a second export adds as much again instead of reusing it. The base model's export, the
candidate's and the Hugging Face export's merged copy together left 20.5 GiB in the Trainer's
process, and the Evaluator that runs next in the same local process was OOM-killed on 24 GiB. In
a child process that memory goes back to the system when the child exits.

How: the Trainer writes the backbone's variables as a TF checkpoint (`tf.train.Checkpoint`,
object-based, so a backbone built the same way reads it whatever strategy wrote it) to a local
temporary directory, and starts

    python -m components.trainer.serving.export_process --job JOB.json

which builds the same backbone (`BackboneRecipe`: model options, vocabulary, LoRA, recompute,
frozen dtype, precision policy), reads the weights, and runs the same `export_serving_model`
(or `export_hugging_face`, in a second child) the Trainer runs inline. The child sees no GPU
(`CUDA_VISIBLE_DEVICES=-1`): the Trainer's process still holds the accelerator's memory, and an
export computes nothing there. Its log lines pass through to the Trainer's stderr; a child that
fails makes the Trainer fail with its exit status and last log lines.

`training.export_process` chooses: `inline` (in the Trainer's process, as before), `child`, or
`auto` (the default): a child for a model of at least `CHILD_EXPORT_MIN_PARAMETERS` parameters
when the Trainer is one process (default or mirrored distribution, no sharding), inline
otherwise. Multi-worker, parameter-server, TPU and sharded runs export inline: their variables
live across processes or devices that a child cannot reach. Cost of a child: a TensorFlow start
(about 5 s), the checkpoint write and read (2.2 GB at 1.1B in bf16: seconds on a local disk) and
the temporary space for it.
"""

import argparse
import collections
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional

import tensorflow as tf

import components

CHILD_EXPORT_MIN_PARAMETERS = 250_000_000  # ~1 GB of float32 serving copy per inline export
EXPORT_PROCESSES = ("auto", "child", "inline")
_SINGLE_PROCESS_DISTRIBUTIONS = ("default", "mirrored")
_LOG_LINES_KEPT = 20


@dataclasses.dataclass(frozen=True)
class BackboneRecipe:
    """How the Trainer built its backbone: what a child process needs to build the same one (and so
    read its checkpoint). Option models are kept as their `model_dump()` dictionaries."""

    model: dict
    vocab_size: int
    lora: dict
    recompute: str
    frozen_dtype: Optional[str]
    policy: str

    def build(self):
        """A new backbone built as the Trainer built its own (weights initialised, not trained)."""
        from components.trainer.model.backbone import build_backbone
        from components.trainer.model.dtype_policy import keras_policy
        from components.trainer.options import LoraOptions, ModelOptions

        with keras_policy(self.policy):
            return build_backbone(
                ModelOptions(**self.model), self.vocab_size, LoraOptions(**self.lora), self.recompute, self.frozen_dtype
            )


@dataclasses.dataclass(frozen=True)
class ExportJob:
    """One child's work: rebuild the backbone, read `weights`, write one export: the serving
    SavedModel to `export_dir`, or the Hugging Face export to `hugging_face_dir`."""

    recipe: BackboneRecipe
    weights: str  # the tf.train.Checkpoint prefix the Trainer wrote
    transform_output: str  # the Transform graph artifact's URI
    generation: dict  # GenerationOptions.model_dump()
    export_dir: Optional[str] = None
    hugging_face_checkpoint: Optional[str] = None  # the checkpoint the model was fine-tuned from
    hugging_face_dir: Optional[str] = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "ExportJob":
        fields = json.loads(text)
        return cls(**{**fields, "recipe": BackboneRecipe(**fields["recipe"])})


def resolve_export_process(choice: str, distribution: str, sharded: bool, parameters: int) -> str:
    """ "child" or "inline" for `training.export_process` (see the module docstring); `distribution` is
    the resolved `training.distribution`. Raises ValueError for `child` where a child cannot export."""
    if choice not in EXPORT_PROCESSES:
        raise ValueError(f"training.export_process must be one of {EXPORT_PROCESSES}, not {choice!r}")
    single_process = distribution in _SINGLE_PROCESS_DISTRIBUTIONS and not sharded
    if choice == "child" and not single_process:
        raise ValueError(
            "training.export_process=child needs a Trainer that is one process (training.distribution default or "
            f"mirrored, no training.sharding); this run has distribution {distribution}"
            f"{' with sharding' if sharded else ''}: use auto or inline"
        )
    if choice == "auto":
        return "child" if single_process and parameters >= CHILD_EXPORT_MIN_PARAMETERS else "inline"
    return choice


def _child_environment() -> dict:
    """The Trainer's environment, plus this project on PYTHONPATH (a source checkout works as an
    installed package does) and no visible GPU."""
    environment = dict(os.environ)
    project_root = os.path.dirname(os.path.dirname(os.path.abspath(components.__file__)))
    environment["PYTHONPATH"] = os.pathsep.join(
        path for path in (project_root, environment.get("PYTHONPATH", "")) if path
    )
    environment["CUDA_VISIBLE_DEVICES"] = "-1"
    environment.setdefault("TF_USE_LEGACY_KERAS", "1")
    return environment


def _run_child(job_file: str) -> None:
    """Runs the child on `job_file`, its output passed through line by line; raises RuntimeError
    with its exit status and last lines when it fails."""
    command = [sys.executable, "-m", "components.trainer.serving.export_process", "--job", job_file]
    last_lines = collections.deque(maxlen=_LOG_LINES_KEPT)
    with subprocess.Popen(
        command, env=_child_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as child:
        logging.info("Export: child process %d started", child.pid)
        for line in child.stdout:
            sys.stderr.write(line)
            last_lines.append(line.rstrip("\n"))
        code = child.wait()
    if code:
        how = (
            f"was killed by signal {-code}" + (" (out of memory?)" if code == -9 else "")
            if code < 0
            else f"exited with status {code}"
        )
        raise RuntimeError(f"the export process {how}; its last lines:\n  " + "\n  ".join(last_lines))


class Exporter:
    """Writes the Trainer's exports of a backbone: the serving SavedModel and, when asked, the Hugging
    Face export; in this process, or (with a `recipe`) in a child process, see the module docstring."""

    def __init__(self, transform_output: str, generation: dict, recipe: Optional[BackboneRecipe] = None):
        self.transform_output = transform_output  # the Transform graph artifact's URI
        self.generation = generation  # GenerationOptions.model_dump()
        self.recipe = recipe

    def write(
        self,
        backbone,
        export_dir: str,
        hugging_face_checkpoint: Optional[str] = None,
        hugging_face_dir: Optional[str] = None,
    ) -> None:
        """The serving SavedModel of `backbone` in `export_dir`; with both `hugging_face_*` arguments
        also the Hugging Face export of the model fine-tuned from that checkpoint."""
        if self.recipe is None:
            self._write_here(backbone, export_dir, hugging_face_checkpoint, hugging_face_dir)
            return
        scratch = tempfile.mkdtemp(prefix="textgen-export-")
        try:
            weights = tf.train.Checkpoint(backbone=backbone).write(os.path.join(scratch, "weights"))
            # One child per export: TensorFlow keeps the serving export's copy in its process too,
            # and the Hugging Face export's merged copy beside it peaked 7 GiB higher at 1.1B.
            jobs = [ExportJob(self.recipe, weights, self.transform_output, self.generation, export_dir=export_dir)]
            if hugging_face_dir:
                jobs.append(
                    ExportJob(
                        self.recipe,
                        weights,
                        self.transform_output,
                        self.generation,
                        hugging_face_checkpoint=hugging_face_checkpoint,
                        hugging_face_dir=hugging_face_dir,
                    )
                )
            for number, job in enumerate(jobs):
                job_file = os.path.join(scratch, f"job-{number}.json")
                with open(job_file, "w", encoding="utf-8") as handle:
                    handle.write(job.to_json())
                _run_child(job_file)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _write_here(
        self,
        backbone,
        export_dir: Optional[str],
        hugging_face_checkpoint: Optional[str],
        hugging_face_dir: Optional[str],
    ) -> None:
        import tensorflow_transform as tft

        from components.tokenizer import loaded
        from components.trainer.checkpoint.hf_export import export_hugging_face
        from components.trainer.options import GenerationOptions
        from components.trainer.serving.export import export_serving_model

        if export_dir:
            export_serving_model(
                backbone, tft.TFTransformOutput(self.transform_output), GenerationOptions(**self.generation), export_dir
            )
        if hugging_face_dir:
            chat = loaded.load(loaded.transform_graph_dir(self.transform_output)).chat()
            export_hugging_face(backbone, hugging_face_checkpoint, hugging_face_dir, chat=chat)


def run_job(job: ExportJob) -> None:
    """The child's work: the same exports the Trainer makes inline, from the weights it wrote."""
    from components.trainer.model.dtype_policy import keras_policy

    backbone = job.recipe.build()
    tf.train.Checkpoint(backbone=backbone).read(job.weights).assert_existing_objects_matched()
    logging.info("Export: read the Trainer's weights (%d variables)", len(backbone.variables))
    with keras_policy(job.recipe.policy):
        Exporter(job.transform_output, job.generation).write(
            backbone, job.export_dir, job.hugging_face_checkpoint, job.hugging_face_dir
        )
    logging.info("Export: wrote %s", job.export_dir or job.hugging_face_dir)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description="Write the Trainer's exports from the weights it checkpointed.")
    parser.add_argument("--job", required=True, help="ExportJob JSON written by the Trainer.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s", force=True)
    for noisy in ("tensorflow", "absl"):  # their INFO lines on every traced signature and written asset
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from components import filesystems

    filesystems.register()  # the export directories may be on gs:// or s3://
    with open(args.job, encoding="utf-8") as handle:
        run_job(ExportJob.from_json(handle.read()))


if __name__ == "__main__":
    from components.filesystems import exit_process

    main()
    exit_process(0)
