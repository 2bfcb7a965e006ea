"""Drawing the sample a tokenizer is learned from, with Beam.

Documents of the train split are cut into chunks of at most `chunk_chars` characters and the
`sample_size` chunks with the smallest sha256 are kept: a uniform sample (the hash is
independent of the text's content for this purpose) that is the same on every run over the same
data, computed as a distributed top-k combine, so the learner's input, and its cost, are bounded
whatever the corpus size. This is what SentencePiece itself recommends for large corpora
(`input_sentence_size`), done on the runner instead of in one process.
"""

import hashlib
from typing import List, NamedTuple

import apache_beam as beam
import tensorflow as tf

from components.example_gen.examples import document_texts
from components.file_patterns import matching_files


class Sample(NamedTuple):
    chunks: List[str]

    @property
    def num_bytes(self) -> int:
        return sum(len(chunk.encode("utf-8")) for chunk in self.chunks)


def chunks_of(text: str, chunk_chars: int) -> List[str]:
    """`text` cut into consecutive pieces of at most `chunk_chars` characters (empty text: none)."""
    return [text[start : start + chunk_chars] for start in range(0, len(text), chunk_chars)]


def sample_key(chunk: str) -> bytes:
    """The order the sample is drawn in: a chunk's sha256."""
    return hashlib.sha256(chunk.encode("utf-8")).digest()


class DrawSample(beam.PTransform):
    """Serialized tf.Examples -> one list: the sampled chunks of their `text_feature`."""

    def __init__(self, text_feature: str, sample_size: int, chunk_chars: int):
        super().__init__()
        self._text_feature = text_feature
        self._sample_size = sample_size
        self._chunk_chars = chunk_chars

    def expand(self, examples: beam.PCollection) -> beam.PCollection:
        return (
            examples
            | "Text" >> beam.FlatMap(document_texts, self._text_feature)
            | "Chunks" >> beam.FlatMap(chunks_of, self._chunk_chars)
            | "SmallestHashes" >> beam.combiners.Top.Smallest(self._sample_size, key=sample_key)
        )


def _write_sample(chunks: List[str], path: str) -> None:
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for chunk in chunks:
            writer.write(chunk.encode("utf-8"))


def read_sample(path: str) -> Sample:
    """The chunks `draw_sample` wrote to `path`."""
    return Sample([record.decode("utf-8") for record in tf.data.TFRecordDataset(path, "GZIP").as_numpy_iterator()])


def draw_sample(
    pipeline: beam.Pipeline,
    file_patterns: List[str],
    text_feature: str,
    sample_size: int,
    chunk_chars: int,
    sample_path: str,
) -> Sample:
    """Runs `pipeline` (not yet run) over the GZIP tf.Example files, writes the sample to
    `sample_path` (GZIP TFRecord, one chunk per record; works on any runner) and returns it."""
    files = matching_files(file_patterns, "examples to learn a tokenizer from")
    with pipeline as p:
        _ = (
            p
            | "Files" >> beam.Create(files)
            | "Read" >> beam.io.ReadAllFromTFRecord(compression_type=beam.io.filesystem.CompressionTypes.GZIP)
            | "Sample" >> DrawSample(text_feature, sample_size, chunk_chars)
            | "Write" >> beam.Map(_write_sample, sample_path)
        )
    return read_sample(sample_path)
