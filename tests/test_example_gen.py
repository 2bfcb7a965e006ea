"""ExampleGen: the corpus readers and the executor (real Beam DirectRunner, real TFRecords)."""
import gzip
import json
import os

import pytest
import tensorflow as tf
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.utils import proto_utils

from components.example_gen.executor import TextCorpusExampleGenExecutor, document_to_example
from components.example_gen.readers import CorpusError, read_documents


def _write(path, content: bytes) -> str:
    with open(path, "wb") as handle:
        handle.write(content)
    return str(path)


def test_txt_documents_are_blank_line_separated_paragraphs(tmp_path):
    path = _write(tmp_path / "a.txt", "Hi Zoë,\nline two\n\n\n  \nSecond doc\r\n\nthird".encode("utf-8"))
    docs = list(read_documents(path))
    assert [d.text for d in docs] == ["Hi Zoë,\nline two", "Second doc", "third"]
    assert [d.line for d in docs] == [1, 6, 8]
    assert {d.source for d in docs} == {"a.txt"}


def test_jsonl_reads_the_text_field_and_keeps_records_without_it(tmp_path):
    lines = [json.dumps({"text": "first"}), "", json.dumps({"body": "no text field"}), json.dumps({"text": "三"})]
    path = _write(tmp_path / "b.jsonl", "\n".join(lines).encode("utf-8"))
    docs = list(read_documents(path))
    assert [d.text for d in docs] == ["first", None, "三"]
    assert [d.line for d in docs] == [1, 3, 4]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("bad.txt", b"good line\n\xff\xfe broken\n", r"bad.txt:2: invalid UTF-8 at byte 0"),
        ("bad.jsonl", b'{"text": "ok"}\n{"text": oops}\n', r"bad.jsonl:2: malformed JSON"),
        ("list.jsonl", b'["not", "an", "object"]\n', r"list.jsonl:1: expected a JSON object"),
        ("num.jsonl", b'{"text": 12}\n', r"num.jsonl:1: field 'text' must be a string"),
        ("data.csv", b"text\nhello\n", r"data.csv: unsupported corpus file type '.csv'"),
    ],
)
def test_malformed_input_is_an_error_naming_file_and_line(tmp_path, name, content, message):
    path = _write(tmp_path / name, content)
    with pytest.raises(CorpusError, match=message):
        list(read_documents(path))


def test_example_features():
    from components.example_gen.readers import Document

    example = document_to_example(Document("héllo", "x.txt", 1))
    features = example.features.feature
    assert features["text"].bytes_list.value == ["héllo".encode("utf-8")]
    assert features["num_chars"].int64_list.value == [5]
    assert features["source"].bytes_list.value == [b"x.txt"]
    missing = document_to_example(Document(None, "y.jsonl", 3)).features.feature
    assert "text" not in missing and "num_chars" not in missing


def _run_executor(input_base: str, output_uri: str) -> standard_artifacts.Examples:
    examples = standard_artifacts.Examples()
    examples.uri = output_uri
    exec_properties = {
        standard_component_specs.INPUT_BASE_KEY: input_base,
        standard_component_specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(
            example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="corpus", pattern="*")])
        ),
        standard_component_specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(
            example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
                example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
                example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1),
            ]))
        ),
    }
    TextCorpusExampleGenExecutor().Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, exec_properties)
    return examples


def _read_texts(examples, split):
    pattern = os.path.join(artifact_utils.get_split_uri([examples], split), "*.gz")
    files = tf.io.gfile.glob(pattern)
    assert files, f"no GZIP TFRecords for split {split}"
    texts = []
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        example = tf.train.Example.FromString(record.numpy())
        texts.append(example.features.feature["text"].bytes_list.value[0].decode("utf-8"))
    return texts


def test_executor_writes_gzip_tfrecords_with_a_hash_split_and_loses_nothing(tiny_corpus, tmp_path):
    examples = _run_executor(tiny_corpus, str(tmp_path / "out"))
    assert artifact_utils.decode_split_names(examples.split_names) == ["train", "eval"]
    train, evaluation = _read_texts(examples, "train"), _read_texts(examples, "eval")
    expected = [d.text for name in sorted(os.listdir(tiny_corpus)) for d in read_documents(os.path.join(tiny_corpus, name))]
    assert sorted(train + evaluation) == sorted(expected)
    assert len(evaluation) > 0 and len(train) > 2 * len(evaluation)
    # The split is a pure function of the content: a second run splits identically.
    again = _run_executor(tiny_corpus, str(tmp_path / "again"))
    assert sorted(_read_texts(again, "eval")) == sorted(evaluation)
    with gzip.open(tf.io.gfile.glob(os.path.join(examples.uri, "Split-train", "*"))[0]) as handle:
        handle.read(1)  # really GZIP-compressed


def test_executor_reports_an_empty_data_root(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="no corpus files match"):
        _run_executor(str(tmp_path / "empty"), str(tmp_path / "out"))
