"""Shared fixtures: tiny corpora, a fast pipeline config, and a real Transform output.

`make test` runs the suite on every core with pytest-xdist, one test file per worker at a time
(`--dist loadfile`), so a module's shared pipeline run is computed once; the files holding the
end-to-end runs start first (`pytest_collection_modifyitems`, kept by `--no-loadscope-reorder`: xdist would otherwise start the files with the most tests first), so the short files fill in around
them at the end. Each worker imports TFX/TF once (about 20 s); tests/README.md has the durations.
"""

import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sys  # noqa: E402

import pytest  # noqa: E402

# Parts of TFX parse absl flags from sys.argv inside pipeline runs; pytest's own options (-v
# would be read as absl's --verbosity) must not reach them.
sys.argv = sys.argv[:1]

from pipeline.config import PROJECT_ROOT  # noqa: E402

BUNDLED_TXT = os.path.join(PROJECT_ROOT, "data", "corpus", "support_replies.txt")


def write_tiny_corpus(directory: str, max_bytes: int = 40_000) -> str:
    """A small but real corpus: the start of the bundled .txt plus a few .jsonl records."""
    os.makedirs(directory, exist_ok=True)
    with open(BUNDLED_TXT, encoding="utf-8") as handle:
        text = handle.read(max_bytes)
    text = text[: text.rfind("\n\n")]  # whole paragraphs only
    with open(os.path.join(directory, "replies.txt"), "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    with open(os.path.join(directory, "notes.jsonl"), "w", encoding="utf-8") as handle:
        for index in range(5):
            handle.write(
                json.dumps({"text": f"Lumen Notes 1.{index}.0 fixes sync for Zoë and José.", "id": index}) + "\n"
            )
    return directory


@pytest.fixture
def tiny_corpus(tmp_path) -> str:
    return write_tiny_corpus(str(tmp_path / "corpus"))


FAST_OVERRIDES = [
    "tokenizer.vocab_size=1024",
    "training.train_steps=30",
    "training.batch_size=8",
    "training.warmup_steps=5",
    "model.context_length=64",
    "model.num_layers=1",
    "model.model_dim=64",
    "model.mlp_dim=128",
    "generation.max_new_tokens=24",
    "generation.num_samples=2",
    # 6 of the 32 bias templates per language: the Evaluator's bias probes grow with templates x
    # (groups + placebos), and these runs test the pipeline's plumbing, not the gate's power (with
    # 6 templates no group can be flagged; the bias gate's own end-to-end test evaluates all of them,
    # tests/bias_corpus.py, and test_bias_association.py the statistics).
    "evaluator.bias.templates_per_group=6",
]


# The fast model (30-60 steps) learns which pieces are common, not yet context: its perplexity
# is about a unigram model's (measured: 372.6 vs 364.3 for the tiny corpus), so the quality gates
# refuse it, as they should. Tests of the pipeline's plumbing (every component runs, the push,
# the baseline comparison, the serving) relax them with these; the quality gates themselves are
# tested both ways in test_evaluator.py and test_bias_e2e.py (a model that learned passes).
WEAK_MODEL_QUALITY = ("evaluator.max_perplexity=600", "evaluator.min_gain_over_unigram=-1")


def fast_config(data_root, output_root, *overrides):
    """The full pipeline's config with FAST_OVERRIDES (then `overrides`), for end-to-end runs."""
    from pipeline.config import load_config

    return load_config(
        overrides=FAST_OVERRIDES + list(overrides), data_root=str(data_root), output_root=str(output_root)
    )


FIXTURE_VOCAB_SIZE = 512  # 3 special + 256 byte pieces + 253 learned ones


def learn_fixture_tokenizer(
    path: str, vocab_size: int = FIXTURE_VOCAB_SIZE, max_bytes: int = 40_000, algorithm: str = "bpe"
) -> str:
    """A SentencePiece model learned (as the Tokenizer stage does) from the start of the bundled
    corpus, written to `path`; returns `path`."""
    from components.tokenizer import learn, model_file
    from components.tokenizer.sample import chunks_of

    with open(BUNDLED_TXT, encoding="utf-8") as handle:
        documents = handle.read(max_bytes).split("\n\n")
    chunks = [chunk for document in documents for chunk in chunks_of(document, 2048)]
    model_file.copy_model(learn.learn_model(chunks, vocab_size, algorithm), path)
    return path


@pytest.fixture(scope="session")
def tokenizer_model(tmp_path_factory) -> str:
    """The fixture SentencePiece model file (FIXTURE_VOCAB_SIZE pieces)."""
    return learn_fixture_tokenizer(str(tmp_path_factory.mktemp("tokenizer") / "sentencepiece.model"))


TRANSFORM_DOCUMENTS = [
    "Hi Zoë,\nthanks for writing about sync.",
    "Second document: 1. Open Settings > Sync.",
    "混合 text, emoji 🙂 and tabs\tand  spaces.",
    "x",
] * 6


@pytest.fixture(scope="session")
def transform_artifacts(tmp_path_factory, tokenizer_model):
    """Runs the real preprocessing_fn through TF Transform on Beam, like the Transform component.

    Returns (transform_output_dir, transformed_examples_file, documents): the transform graph
    (tokenizing with the fixture SentencePiece model) written with WriteTransformFn, and the transformed
    documents as GZIP tf.Example TFRecords encoded with the transformed schema, in input order.
    """
    from components.transform.standalone import analyze_and_transform

    root = tmp_path_factory.mktemp("transform")
    examples_prefix = str(root / "transformed")
    output_dir = analyze_and_transform(
        TRANSFORM_DOCUMENTS, tokenizer_model, str(root / "transform_graph"), examples_prefix
    )
    return output_dir, examples_prefix + "*.gz", list(TRANSFORM_DOCUMENTS)


TINY_MODEL_KWARGS = dict(num_layers=2, num_heads=2, model_dim=32, mlp_dim=64, context_length=32)


@pytest.fixture(scope="session")
def tiny_backbone(transform_artifacts):
    """An untrained 2-layer backbone with a 32-token context (random, seeded weights), sized to
    the fixture tokenizer's vocabulary."""
    import tensorflow as tf

    from components.trainer.model.backbone import build_backbone
    from components.trainer.options import ModelOptions

    tf.keras.utils.set_random_seed(0)
    return build_backbone(ModelOptions(**TINY_MODEL_KWARGS), FIXTURE_VOCAB_SIZE)


@pytest.fixture(scope="session")
def exported_model(tiny_backbone, transform_artifacts, tmp_path_factory):
    """(loaded SavedModel, export dir) of the tiny backbone with the real transform graph."""
    import tensorflow as tf
    import tensorflow_transform as tft

    from components.trainer.options import GenerationOptions
    from components.trainer.serving import export

    output_dir, _, _ = transform_artifacts
    export_dir = str(tmp_path_factory.mktemp("export") / "model")
    generation = GenerationOptions(max_new_tokens=8, temperature=0.0, top_k=0)
    export.export_serving_model(tiny_backbone, tft.TFTransformOutput(output_dir), generation, export_dir)
    return tf.saved_model.load(export_dir), export_dir


def write_raw_examples(path: str, documents) -> str:
    """Writes `documents` as GZIP raw tf.Examples with a `text` feature, as ExampleGen writes them."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for text in documents:
            feature = {"text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode()]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return path


def pytest_collection_modifyitems(session, config, items):
    """Moves the test files that hold tests marked `slow` (the end-to-end runs, minutes each) to
    the front, keeping the order within each file and among the other files: with several
    workers the long files start first and the short ones balance the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
