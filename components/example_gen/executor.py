"""A file-based ExampleGen executor for text corpora.

TFX's `FileBasedExampleGen` drives it: the base executor handles spans, the hash-based train/eval
split and writing GZIP TFRecords; this executor supplies the Beam transform that reads the
matched corpus files into `tf.train.Example`s with features:

    text       bytes   the document (absent when a .jsonl record lacks the text field, so the
                       schema's presence check reports it instead of the record vanishing)
    num_chars  int64   length of the document in Unicode code points
    source     bytes   file name the document came from
"""
import json
import os
from typing import Any, Dict, List

import apache_beam as beam
import tensorflow as tf
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.types import standard_component_specs

from components.example_gen.readers import CorpusError, Document, read_documents

JSONL_TEXT_FIELD_KEY = "jsonl_text_field"


def document_to_example(document: Document) -> tf.train.Example:
    """Encodes one document as a tf.Example (see the module docstring for the features)."""
    features = {"source": tf.train.Feature(bytes_list=tf.train.BytesList(value=[document.source.encode("utf-8")]))}
    if document.text is not None:
        features["text"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[document.text.encode("utf-8")]))
        features["num_chars"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[len(document.text)]))
    return tf.train.Example(features=tf.train.Features(feature=features))


def list_corpus_files(input_base: str, pattern: str) -> List[str]:
    """Returns the sorted files matching `pattern` under `input_base`, or raises naming what is wrong."""
    if not tf.io.gfile.isdir(input_base):
        raise CorpusError(f"data root {input_base} does not exist or is not a directory")
    full_pattern = os.path.join(input_base, pattern)
    files = sorted(path for path in tf.io.gfile.glob(full_pattern) if not tf.io.gfile.isdir(path))
    if not files:
        raise CorpusError(f"no corpus files match {full_pattern}")
    return files


def _custom_config(exec_properties: Dict[str, Any]) -> Dict[str, Any]:
    raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    return json.loads(raw) if raw else {}


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(tf.train.Example)
def _CorpusToExample(pipeline: beam.Pipeline, exec_properties: Dict[str, Any], split_pattern: str) -> beam.pvalue.PCollection:
    """Reads every corpus file matching `split_pattern` into tf.Examples."""
    input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    text_field = _custom_config(exec_properties).get(JSONL_TEXT_FIELD_KEY, "text")
    files = list_corpus_files(input_base, split_pattern)
    return (
        pipeline
        | "CorpusFiles" >> beam.Create(files)
        | "ReadDocuments" >> beam.FlatMap(read_documents, jsonl_text_field=text_field)
        | "ToExample" >> beam.Map(document_to_example)
    )


class TextCorpusExampleGenExecutor(BaseExampleGenExecutor):
    """ExampleGen executor for .txt and .jsonl corpora (see module docstring)."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        return _CorpusToExample
