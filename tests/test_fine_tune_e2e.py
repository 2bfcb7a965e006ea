"""End to end: fine-tuning a Hugging Face checkpoint with LoRA, through the whole local pipeline.

`textgen run --set model.checkpoint=<dir> --set training.lora.rank=4` on the bundled corpus, for a
GPT-2 checkpoint with a byte-level BPE tokenizer and a Llama checkpoint with a SentencePiece
tokenizer (tiny random fixtures, tests/hf_checkpoints.py). Checked: the Tokenizer stage used the
checkpoint's tokenizer, the Evaluator compared the candidate with the base checkpoint (the first
baseline): the fine-tuned model is better on the eval text by a clear margin, and the safety and
bias probes ran on both and report the change, the version is
pushed with its Hugging Face export and model card, the registry records the base checkpoint and
the adapter settings, and the pushed SavedModel generates in a fresh process with only TensorFlow
and TF Text. The Llama run writes its exports in a child process (`training.export_process=child`),
the GPT-2 run in the Trainer's own.

The corpus has '!', '"' and '#', which GPT-2's id layout (the fixture's: bytes first) makes ids
0, 1 and 2: the TokenGate, whose schema is written for the run's tokenizer, lets them through.
Both checkpoints ship a tokenizer.json, which the run tokenizes with (the Llama one also has the
tokenizer.model it was converted from); the base model the Evaluator exports (the checkpoint's
weights, unmoved) generates from text prompts exactly what transformers generated
(tests/fixtures/hf/<family>/expected_text.json).

Marked slow (about two minutes per family here); CI runs them.
"""

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from components.registry import model_registry as registry
from components.tokenizer import loaded
from components.trainer.checkpoint.fingerprint import checkpoint_sha256
from components.trainer.training import record
from pipeline.local_runner import run_locally
from tests.conftest import WEAK_MODEL_QUALITY, write_tiny_corpus
from tests.hf_checkpoints import checkpoint_with_tokenizer

pytestmark = pytest.mark.slow

FINE_TUNE_OVERRIDES = [
    "training.train_steps=40",
    "training.batch_size=8",
    "training.warmup_steps=5",
    # The fixtures are random networks: a higher rate than the LoRA default shows learning in 40 steps.
    "training.learning_rate=3e-3",
    "training.lora.rank=4",
    "training.lora.targets=[attention, mlp]",
    "model.context_length=64",
    "generation.max_new_tokens=24",
    "generation.num_samples=2",
    "evaluator.bias.templates_per_group=6",  # as FAST_OVERRIDES: these runs are not about the bias gate
    *WEAK_MODEL_QUALITY,
]


# The bundled corpus has no '!', '"' or '#' (ids 0, 1, 2 in GPT-2's layout): some go into its
# replies, inside documents that cleaning keeps (one '#' in a reply of dozens of words).
PUNCTUATION = {
    "happy to help.": "happy to help!",
    "Settings > ": '"Settings" > ',
    "Thanks for ": "Thanks (case #7) for ",
}


def _write_corpus(directory: str) -> str:
    """The tiny corpus under `directory`, with the punctuation above in its replies; returns it."""
    corpus = write_tiny_corpus(directory)
    path = os.path.join(corpus, "replies.txt")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    for old, new in PUNCTUATION.items():
        assert old in text
        text = text.replace(old, new)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return corpus


def _token_ids_trained_on(output_root: str) -> set:
    """Every id in the run's transformed examples (Transform's output, which the TokenGate checked)."""
    import tensorflow as tf

    files = glob.glob(os.path.join(output_root, "**", "transformed_examples", "**", "*.gz"), recursive=True)
    assert files, f"no transformed examples under {output_root}"
    found = set()
    for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        found.update(
            tf.train.Example.FromString(serialized.numpy()).features.feature["token_ids$ragged_values"].int64_list.value
        )
    return found


def _config(checkpoint: str, root, *overrides):
    from pipeline.config import load_config

    return load_config(
        overrides=FINE_TUNE_OVERRIDES + [f"model.checkpoint={checkpoint}", *overrides],
        data_root=str(root / "corpus"),
        output_root=str(root / "out"),
    )


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """family -> (checkpoint, config, summary) of the first fine-tuning run into a fresh output
    root, made once per module (the next-run test continues from the Llama one)."""
    runs = {}

    def run(family: str) -> tuple:
        if family not in runs:
            root = tmp_path_factory.mktemp(family)
            checkpoint = checkpoint_with_tokenizer(family, str(root / "checkpoint"))
            _write_corpus(str(root / "corpus"))
            # The Llama run exports in a child process (the default from 250M parameters), the GPT-2
            # one in the Trainer's: both paths make the base, candidate and Hugging Face exports.
            config = _config(checkpoint, root, *(["training.export_process=child"] if family == "llama" else []))
            runs[family] = (checkpoint, config, run_locally(config), root)
        return runs[family]

    return run


@pytest.mark.parametrize("family,tokenizer_kind", [("gpt2", "byte_level_bpe"), ("llama", "sentencepiece_bpe")])
def test_lora_fine_tuning_a_checkpoint_is_blessed_against_the_base_model_and_pushed(family, tokenizer_kind, first_run):
    from tokenizers import Tokenizer as HfTokenizer

    from components.model_client import ModelClient
    from tests.hf_checkpoints import expected_text

    checkpoint, config, summary, root = first_run(family)
    assert summary["succeeded"], summary["error"]
    if family == "gpt2":  # the token data the TokenGate passed has ids 0-2: ordinary bytes there
        reference = HfTokenizer.from_file(os.path.join(checkpoint, "tokenizer.json"))
        assert [reference.token_to_id(char) for char in '!"#'] == [0, 1, 2]
        assert {0, 1, 2} <= _token_ids_trained_on(str(root / "out"))
    assert summary["blessing"]["blessed"], summary["blessing"]
    with open(os.path.join(summary["blessing"]["uri"], "evaluation.json"), encoding="utf-8") as handle:
        evaluation = json.load(handle)
    baseline, quality = evaluation["baseline"], evaluation["metrics"]["quality"]
    assert baseline["kind"] == "base_checkpoint" and baseline["path"].endswith("base_model")
    # The checkpoint's own weights, exported by the run, answer text prompts as transformers does.
    rows = expected_text(family)["rows"]
    base = ModelClient(baseline["path"])
    assert base.generate([r["prompt"] for r in rows], expected_text(family)["max_new_tokens"], 0.0) == [
        r["text"] for r in rows
    ]
    # Fine-tuning made the model better on this corpus than the checkpoint it started from.
    assert quality["bits_per_byte"] < 0.95 * quality["baseline_bits_per_byte"], quality
    gate = next(g for g in evaluation["gates"] if g["name"] == "quality.bits_per_byte_change")
    assert gate["verdict"] == "PASS", gate
    # The safety and bias probes ran on the base checkpoint too; the change is reported.
    comparison = evaluation["metrics"]["baseline_comparison"]
    assert set(comparison["safety"]) == {"toxic_fraction", "expected_max_toxicity", "toxicity_probability"}
    assert len(comparison["bias"]) == len(evaluation["metrics"]["bias"]["group_effects"]) > 0
    report = open(os.path.join(summary["blessing"]["uri"], "report.html"), encoding="utf-8").read()
    assert "Safety and bias against the base checkpoint" in report and "Quality vs base checkpoint" in report

    push = summary["push"]
    assert push["pushed"] and push["version"] == 1
    trained = record.read(os.path.dirname(baseline["path"]))  # the model artifact holding base_model/
    assert trained["export_process"] == ("child" if family == "llama" else "inline"), trained.get("export_process")
    serving = config.layout.serving_dir
    tokenizer_assets = os.listdir(os.path.join(push["path"], "assets"))
    assert "tokenizer.json" in tokenizer_assets and "tokenizer.model" not in tokenizer_assets
    assert loaded.load(loaded.saved_model_dir(push["path"])).kind == tokenizer_kind
    exported = os.path.join(serving, "hugging_face", "1")
    assert {"config.json", "model.safetensors"} <= set(os.listdir(exported))
    card = open(os.path.join(serving, "model_cards", "1.md"), encoding="utf-8").read()
    assert checkpoint in card and "LoRA rank 4" in card

    model_registry = registry.ModelRegistry(registry.embedded_tracking_uri(config.layout.registry_dir), "textgen")
    tags = model_registry.client.get_model_version("textgen", "1").tags
    assert tags[registry.TAG_BASE_CHECKPOINT] == checkpoint
    assert tags[registry.TAG_BASE_CHECKPOINT_SHA256] == checkpoint_sha256(checkpoint)
    assert json.loads(tags[registry.TAG_ADAPTERS])["rank"] == 4

    script = textwrap.dedent(f"""
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (the tokenizer's ops)
        model = tf.saved_model.load({push["path"]!r})
        out = model.signatures["serving_default"](prompts=tf.constant(["Thanks for reaching out about"]))
        print("GENERATED:", repr(out["generations"].numpy()[0].decode("utf-8", "replace")))
    """)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0 and "GENERATED:" in result.stdout, result.stderr[-3000:]


def test_the_next_run_reuses_the_tokenizer_warm_starts_its_adapters_and_is_compared_with_production(first_run):
    """The second scheduled run of the Llama fine-tune, into the same output root, with
    `tokenizer.policy=reuse` and `training.warm_start`: the Tokenizer stage takes the production
    model's copy of the checkpoint's tokenizer (same hash), the Trainer warm-starts the LoRA
    backbone from production (its merged weights the frozen base, new adapters on top), and the
    Evaluator compares the candidate with production (registered version 1), not with the base
    checkpoint the Trainer exports again. A shorter run: the cached data stages are reused."""
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata

    from components.trainer.training import record
    from pipeline.run_summary import RunRecord

    checkpoint, _, first, root = first_run("llama")
    assert first["push"]["pushed"] and first["push"]["version"] == 1, first["push"]
    config = _config(checkpoint, root, "tokenizer.policy=reuse", "training.warm_start=true", "training.train_steps=10")
    summary = run_locally(config)
    assert summary["succeeded"], summary["error"]

    store = metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(config.layout.metadata_path))
    tokenizer = RunRecord(store, config.pipeline_name, summary["run_id"]).output("Tokenizer", "tokenizer")
    properties = {name: value.string_value for name, value in tokenizer.custom_properties.items()}
    assert properties["source"] == "reused" and "registered version 1" in properties["source_detail"]
    assert properties["sha256"] == loaded.load(checkpoint).sha256
    assert properties["model_path"] == loaded.saved_model_dir(first["push"]["path"])

    trained = record.read(summary["trained_model"])
    assert trained["warm_start"]["registered_version"] == 1 and trained["lora"]["rank"] == 4
    with open(os.path.join(summary["blessing"]["uri"], "evaluation.json"), encoding="utf-8") as handle:
        evaluation = json.load(handle)
    baseline = evaluation["baseline"]
    assert baseline["kind"] == "production" and baseline["registry"]["registered_version"] == 1, baseline
    # Production was the first run's candidate: its safety and bias probes are read back, not run again.
    assert evaluation["metrics"]["baseline_comparison"]["baseline_probes"] == "reused"
    assert (
        "baseline_comparison" in evaluation["seconds"] and len(evaluation["metrics"]["baseline_comparison"]["bias"]) > 0
    )
    assert baseline["path"] == first["push"]["path"] and "bits_per_byte" in baseline
    assert os.path.isdir(record.base_model_path(summary["trained_model"]))  # exported, not the baseline now
