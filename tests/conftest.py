"""Shared fixtures: tiny corpora, a fast pipeline config, and a real Transform output.

All tests run in one pytest process on purpose: importing TFX/TF costs ~50 s per process here.
"""
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

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
            handle.write(json.dumps({"text": f"Lumen Notes 1.{index}.0 fixes sync for Zoë and José.", "id": index}) + "\n")
    return directory


@pytest.fixture
def tiny_corpus(tmp_path) -> str:
    return write_tiny_corpus(str(tmp_path / "corpus"))


FAST_OVERRIDES = [
    "training.train_steps=30",
    "training.batch_size=8",
    "training.warmup_steps=5",
    "model.context_length=64",
    "model.num_layers=1",
    "model.model_dim=64",
    "model.mlp_dim=128",
    "generation.max_new_tokens=24",
    "generation.num_samples=2",
]


TRANSFORM_DOCUMENTS = [
    "Hi Zoë,\nthanks for writing about sync.",
    "Second document: 1. Open Settings > Sync.",
    "混合 text, emoji 🙂 and tabs\tand  spaces.",
    "x",
] * 6


@pytest.fixture(scope="session")
def transform_artifacts(tmp_path_factory):
    """Runs the real preprocessing_fn through TF Transform on Beam, like the Transform component.

    Returns (transform_output_dir, transformed_examples_file, documents): the transform graph
    written with WriteTransformFn, and the transformed documents as GZIP tf.Example TFRecords
    encoded with the transformed schema, in input order.
    """
    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam

    from components.transform.preprocessing import preprocessing_fn

    root = tmp_path_factory.mktemp("transform")
    output_dir = str(root / "transform_graph")
    examples_prefix = str(root / "transformed")
    raw_metadata = tft.DatasetMetadata.from_feature_spec({"text": tf.io.FixedLenFeature([1], tf.string)})
    raw_data = [{"text": [document.encode("utf-8")]} for document in TRANSFORM_DOCUMENTS]
    with beam.Pipeline() as pipeline, tft_beam.Context(temp_dir=str(root / "tmp")):
        raw = pipeline | beam.Create(raw_data, reshuffle=False)
        (transformed, transformed_metadata), transform_fn = (raw, raw_metadata) | tft_beam.AnalyzeAndTransformDataset(
            preprocessing_fn, output_record_batches=False
        )
        coder = tft.coders.ExampleProtoCoder(transformed_metadata.schema)
        _ = (
            transformed
            | beam.Map(coder.encode)
            | beam.io.WriteToTFRecord(examples_prefix, file_name_suffix=".gz", num_shards=1,
                                      compression_type=beam.io.filesystem.CompressionTypes.GZIP)
        )
        _ = transform_fn | tft_beam.WriteTransformFn(output_dir)
    return output_dir, examples_prefix + "*.gz", list(TRANSFORM_DOCUMENTS)


TINY_MODEL_KWARGS = dict(num_layers=2, num_heads=2, model_dim=32, mlp_dim=64, context_length=32)


@pytest.fixture(scope="session")
def tiny_backbone():
    """An untrained 2-layer backbone with a 32-token context (random, seeded weights)."""
    import tensorflow as tf

    from components.trainer.backbone import build_backbone
    from components.transform import tokenizer
    from pipeline.config import ModelConfig

    tf.keras.utils.set_random_seed(0)
    return build_backbone(ModelConfig(**TINY_MODEL_KWARGS), tokenizer.VOCAB_SIZE)


@pytest.fixture(scope="session")
def exported_model(tiny_backbone, transform_artifacts, tmp_path_factory):
    """(loaded SavedModel, export dir) of the tiny backbone with the real transform graph."""
    import tensorflow as tf
    import tensorflow_transform as tft

    from components.trainer import export
    from pipeline.config import GenerationConfig

    output_dir, _, _ = transform_artifacts
    export_dir = str(tmp_path_factory.mktemp("export") / "model")
    generation = GenerationConfig(max_new_tokens=8, temperature=0.0, top_k=0)
    export.export_serving_model(tiny_backbone, tft.TFTransformOutput(output_dir), generation, export_dir)
    return tf.saved_model.load(export_dir), export_dir
