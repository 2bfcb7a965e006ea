"""Running the project's `preprocessing_fn` with TF Transform outside a TFX pipeline.

Used by tests and benchmarks to produce the same transform graph that the tokenizing Transform
component writes (the tokenizer embedded, and its files copied into its assets), from an
in-memory list of documents and a tokenizer (a SentencePiece model file or tokenizer directory).
"""

import functools
import os
from typing import Optional, Sequence

import apache_beam as beam
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam

from components.tokenizer import loaded
from components.transform.preprocessing import RAW_TEXT_KEY, TOKENIZER_MODEL_KEY, preprocessing_fn


def analyze_and_transform(
    documents: Sequence[str],
    tokenizer_model: str,
    output_dir: str,
    transformed_examples_prefix: Optional[str] = None,
) -> str:
    """Writes the transform graph for `tokenizer_model` (a learned .model file or a tokenizer
    directory, see tokenizer/loaded.py) to `output_dir`.

    When `transformed_examples_prefix` is given, also writes the transformed `documents`, in input
    order, as GZIP tf.Example TFRecords encoded with the transformed schema (as Transform does).
    Returns `output_dir`.
    """
    raw_metadata = tft.DatasetMetadata.from_feature_spec({RAW_TEXT_KEY: tf.io.FixedLenFeature([1], tf.string)})
    raw_data = [{RAW_TEXT_KEY: [document.encode("utf-8")]} for document in documents]
    fn = functools.partial(preprocessing_fn, custom_config={TOKENIZER_MODEL_KEY: tokenizer_model})
    options = beam.options.pipeline_options.PipelineOptions(
        ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    )
    with beam.Pipeline(options=options) as pipeline, tft_beam.Context(temp_dir=os.path.join(output_dir, "tmp")):
        raw = pipeline | "Documents" >> beam.Create(raw_data, reshuffle=False)
        (transformed, transformed_metadata), transform_fn = (raw, raw_metadata) | tft_beam.AnalyzeAndTransformDataset(
            fn, output_record_batches=False
        )
        _ = transform_fn | tft_beam.WriteTransformFn(output_dir)
        if transformed_examples_prefix:
            coder = tft.coders.ExampleProtoCoder(transformed_metadata.schema)
            _ = (
                transformed
                | "Encode" >> beam.Map(coder.encode)
                | "Write"
                >> beam.io.WriteToTFRecord(
                    transformed_examples_prefix,
                    file_name_suffix=".gz",
                    num_shards=1,
                    compression_type=beam.io.filesystem.CompressionTypes.GZIP,
                )
            )
    loaded.load(tokenizer_model).write(loaded.transform_graph_dir(output_dir))
    return output_dir
