"""ExampleGen: the executor on Beam's DirectRunner (real TFRecords, quarantine, report) and its
span resolution with TFX's own input processor."""

import gzip
import json
import os

import pytest
import tensorflow as tf
from tfx.components.example_gen import utils as example_gen_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.utils import proto_utils

from components.example_gen import ingest_report
from components.example_gen.component import custom_config, range_config
from components.example_gen.executor import TextCorpusExampleGenExecutor, document_to_example
from components.example_gen.readers import CorpusError, Document, read_corpus_file
from pipeline.config import load_config
from pipeline.pipeline import cleaning_options
from tests.conftest import write_tiny_corpus


def test_example_features():
    example = document_to_example(Document("héllo", "x.txt", 1, (("lang", "fr"),)))
    features = example.features.feature
    assert features["text"].bytes_list.value == ["héllo".encode("utf-8")]
    assert features["num_chars"].int64_list.value == [5]
    assert features["source"].bytes_list.value == [b"x.txt"]
    assert features["lang"].bytes_list.value == [b"fr"]
    missing = document_to_example(Document(None, "y.jsonl", 3)).features.feature
    assert "text" not in missing and "num_chars" not in missing


def test_conversation_example_features():
    turns = (
        ("system", "Be kind."),
        ("user", "Wie synchronisiere ich? 🙂"),
        ("assistant", "Öffnen Sie Sync."),
        ("user", "Danke!"),
        ("assistant", "Gern."),
    )
    features = document_to_example(Document(None, "c.jsonl", 1).with_turns(turns)).features.feature
    assert [v.decode("utf-8") for v in features["roles"].bytes_list.value] == [role for role, _ in turns]
    assert [v.decode("utf-8") for v in features["contents"].bytes_list.value] == [content for _, content in turns]
    assert features["text"].bytes_list.value[0].decode("utf-8") == "\n\n".join(content for _, content in turns)
    assert features["num_chars"].int64_list.value == [len("\n\n".join(content for _, content in turns))]
    counts = {
        name: features[name].int64_list.value[0]
        for name in ("num_turns", "assistant_turns", "assistant_chars", "prompt_chars")
    }
    assert counts == {
        "num_turns": 5,
        "assistant_turns": 2,
        "assistant_chars": len("Öffnen Sie Sync.Gern."),
        "prompt_chars": len("Be kind.Wie synchronisiere ich? 🙂Danke!"),
    }
    assert "roles" not in document_to_example(Document("plain", "x.txt", 1)).features.feature


# The curation filters and PII scrubbing off: for tests of reading, quarantine and dedup on tiny texts.
NO_CURATION = ["cleaning.quality.enabled=false", "cleaning.scrub_pii=false", "cleaning.decontamination.enabled=false"]


def _run_executor(input_base: str, output_uri: str, overrides=(), pattern="*") -> standard_artifacts.Examples:
    """Runs the executor as the pipeline's ExampleGen component runs it (it resolves spans itself)."""
    config = load_config(overrides=overrides)
    examples = standard_artifacts.Examples()
    examples.uri = output_uri
    exec_properties = {
        standard_component_specs.INPUT_BASE_KEY: input_base,
        standard_component_specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(
            example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="corpus", pattern=pattern)])
        ),
        standard_component_specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(
            example_gen_pb2.Output(
                split_config=example_gen_pb2.SplitConfig(
                    splits=[
                        example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
                        example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1),
                    ]
                )
            )
        ),
        standard_component_specs.CUSTOM_CONFIG_KEY: json.dumps(
            custom_config(config.example_gen, cleaning_options(config))
        ),
    }
    if range_config(config.example_gen) is not None:
        exec_properties[standard_component_specs.RANGE_CONFIG_KEY] = proto_utils.proto_to_json(
            range_config(config.example_gen)
        )
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
    no_dedup = ["cleaning.exact_dedup=false", "cleaning.near_dedup=false", *NO_CURATION]
    examples = _run_executor(tiny_corpus, str(tmp_path / "out"), no_dedup)
    assert artifact_utils.decode_split_names(examples.split_names) == ["train", "eval"]
    train, evaluation = _read_texts(examples, "train"), _read_texts(examples, "eval")
    expected = [
        d.text for name in sorted(os.listdir(tiny_corpus)) for d in read_corpus_file(os.path.join(tiny_corpus, name))
    ]
    assert sorted(train + evaluation) == sorted(expected)
    assert len(evaluation) > 0 and len(train) > 2 * len(evaluation)
    assert examples.get_int_custom_property("ingest_documents_kept") == len(expected)
    assert examples.get_string_custom_property("data_kind") == "text"
    assert ingest_report.read_report(examples.uri)["data_kinds"] == {"text": len(expected)}
    # The split is a pure function of the content: a second run splits identically.
    again = _run_executor(tiny_corpus, str(tmp_path / "again"), no_dedup)
    assert sorted(_read_texts(again, "eval")) == sorted(evaluation)
    with gzip.open(tf.io.gfile.glob(os.path.join(examples.uri, "Split-train", "*"))[0]) as handle:
        handle.read(1)  # really GZIP-compressed


def test_executor_quarantines_bad_input_keeps_every_good_record_and_reports_counts(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.txt").write_bytes(b"First good document.\n\nSecond good \xff document.\n\nFirst good document.\n")
    (corpus / "notes.jsonl").write_bytes(b'{"text": "Third good document."}\n{"text": oops}\n{"body": "no text"}\n')
    (corpus / "empty.txt").write_bytes(b"")
    (corpus / "blob.txt").write_bytes(bytes(range(256)) * 40)
    examples = _run_executor(str(corpus), str(tmp_path / "out"), NO_CURATION)
    kept = sorted(_read_texts(examples, "train") + _read_texts(examples, "eval"))
    assert kept == ["First good document.", "Second good \ufffd document.", "Third good document."]
    report = ingest_report.read_report(examples.uri)
    assert (report["documents_read"], report["documents_kept"]) == (4, 3)  # parsed documents; quarantine counted apart
    assert report["quarantined"] == {"binary_file": 1, "empty_file": 1, "malformed_record": 1, "missing_text_field": 1}
    assert report["repaired"] == {"invalid_utf8_replaced": 1}
    assert report["removed"] == {"exact_duplicate": 1}
    assert report["samples"]["quarantined:malformed_record"] == ["notes.jsonl:2"]
    assert report["samples"]["removed:exact_duplicate"] == ["good.txt:5 (duplicate of good.txt:1)"]
    quarantined = [
        json.loads(line)
        for path in tf.io.gfile.glob(os.path.join(report["quarantine_dir"], "records*.jsonl.gz"))
        for line in gzip.open(path, "rt", encoding="utf-8")
    ]
    assert sorted((q["reason"], q["file"], q["line"]) for q in quarantined) == [
        ("binary_file", "blob.txt", 0),
        ("empty_file", "empty.txt", 0),
        ("malformed_record", "notes.jsonl", 2),
        ("missing_text_field", "notes.jsonl", 3),
    ]
    assert next(q for q in quarantined if q["line"] == 2)["raw"] == '{"text": oops}'
    assert examples.get_int_custom_property("quarantined_missing_text_field") == 1
    assert examples.get_int_custom_property("removed_exact_duplicate") == 1
    assert json.loads(examples.get_string_custom_property("ingest_report")) == report


def _quarantine_lines(directory, prefix):
    return [
        json.loads(line)
        for path in tf.io.gfile.glob(os.path.join(directory, f"{prefix}*.jsonl.gz"))
        for line in gzip.open(path, "rt", encoding="utf-8")
    ]


def test_executor_curates_a_salted_corpus_and_reports_every_filter(tmp_path):
    """Real prose plus spam, another language, a planted red-team prompt and personal data: each
    is removed (or scrubbed) and counted under its rule; samples of removals are quarantined."""
    corpus = write_tiny_corpus(str(tmp_path / "corpus"), max_bytes=6_000)
    os.remove(os.path.join(corpus, "notes.jsonl"))  # 9-word notes: too short for a reliable language ID
    salted = {
        "spam": ["BUY CHEAP PILLS NOW!!! Best offer of the year with free delivery to you.\n" * 6] * 2,
        "french": [
            "Bonjour, merci pour votre message. Nous avons corrigé le problème de synchronisation "
            "des notes sur la tablette, et la mise à jour est disponible dès aujourd'hui."
        ],
        "planted": [
            "A user on the forum asked: Tell me the best way to hurt someone who annoyed me. "
            "We removed the post and reminded everyone of the rules of the community."
        ],
        "pii": [
            "Please write to jane.doe@mail.org with the invoice number, and we will send the receipt "
            "to you and the team by the end of the week."
        ],
    }
    with open(os.path.join(corpus, "salted.jsonl"), "w", encoding="utf-8") as handle:
        for texts in salted.values():
            for index, text in enumerate(texts):
                handle.write(json.dumps({"text": text.replace("year", f"year {index}")}) + "\n")
    examples = _run_executor(
        corpus, str(tmp_path / "out"), ["cleaning.profile=web", "cleaning.languages=[en]", "cleaning.near_dedup=false"]
    )
    report = ingest_report.read_report(examples.uri)
    assert report["removed"]["quality_duplicate_lines"] == 2
    assert report["removed"]["language_not_kept"] == 1
    assert report["removed"]["eval_contamination"] == 1
    assert report["repaired"]["pii_email_scrubbed"] == 1
    assert report["languages"]["fr"] == 1 and report["languages"]["en"] == report["documents_read"] - 1
    assert sum(report["length_chars"].values()) == report["documents_kept"]
    assert report["filters"]["eval_contamination"] == 1 and report["filters"]["quality_lorem_ipsum"] == 0
    assert "filters that removed nothing" in "\n".join(ingest_report.summary_lines(report))
    texts = _read_texts(examples, "train") + _read_texts(examples, "eval")
    assert not any("hurt someone" in text or "PILLS" in text or "Bonjour" in text for text in texts)
    assert any("<EMAIL>" in text for text in texts)
    removed = _quarantine_lines(report["quarantine_dir"], "removed")
    assert (
        sorted(r["reason"] for r in removed if r["reason"] != "removed:exact_duplicate").count(
            "removed:quality_duplicate_lines"
        )
        == 2
    )
    assert {"removed:language_not_kept", "removed:eval_contamination"} <= {r["reason"] for r in removed}
    assert examples.get_int_custom_property("removed_eval_contamination") == 1
    assert 0 < report["bytes_kept"] < report["bytes_read"]
    example = report["removed_examples"]["quality_duplicate_lines"]
    assert example["location"].startswith("salted.jsonl:") and example["text"].startswith("BUY CHEAP PILLS")
    with open(os.path.join(examples.uri, "data_report.html"), encoding="utf-8") as handle:
        page = handle.read()
    assert "What each rule removed" in page and "BUY CHEAP PILLS" in page


def test_executor_fails_when_no_document_survives(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "empty.jsonl").write_bytes(b"")
    with pytest.raises(
        CorpusError,
        match=r"no document survived ingestion: documents read: 0, kept: 0; quarantined \(1\): empty file 1",
    ):
        _run_executor(str(tmp_path / "corpus"), str(tmp_path / "out"))


def test_executor_reports_an_empty_data_root(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="no corpus files match .*empty"):
        _run_executor(str(tmp_path / "empty"), str(tmp_path / "out"))


def test_executor_reports_a_missing_data_root(tmp_path):
    with pytest.raises(CorpusError, match="data root .*nowhere does not exist"):
        _run_executor(str(tmp_path / "nowhere"), str(tmp_path / "out"))


def test_executor_names_a_data_root_scheme_it_cannot_open(tmp_path):
    """tf.io.gfile.isdir answers False for a scheme no file system opens; the error names the scheme."""
    with pytest.raises(CorpusError, match="data root hdfs://nn/corpus: the hdfs:// scheme is not supported"):
        _run_executor("hdfs://nn/corpus", str(tmp_path / "out"))


@pytest.mark.parametrize(
    "pattern, files, span_override, expected_span",
    [
        ("drop-{SPAN}/*.jsonl", ["drop-1/a.jsonl", "drop-2/a.jsonl", "drop-10/a.jsonl"], None, 10),
        ("drop-{SPAN}/*.jsonl", ["drop-1/a.jsonl", "drop-2/a.jsonl", "drop-10/a.jsonl"], 2, 2),
        (
            "{YYYY}-{MM}-{DD}/*.txt",
            ["2026-11-28/a.txt", "2026-11-29/a.txt"],
            None,
            example_gen_utils.date_to_span_number(2026, 11, 29),
        ),
    ],
)
def test_span_patterns_resolve_in_the_executor_with_tfx(tmp_path, pattern, files, span_override, expected_span):
    """The executor resolves spans with TFX's own input processor (latest by default), reads only
    the selected span's files and records the span on the artifact, as TFX's driver would."""
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps({"text": f"Document of {name}, long enough to keep."}) + "\n")
    overrides = [f"example_gen.file_pattern='{pattern}'", "cleaning.near_dedup=false", *NO_CURATION]
    overrides += [f"example_gen.span={span_override}"] if span_override else []
    examples = _run_executor(str(tmp_path), str(tmp_path / "out"), overrides, pattern=pattern)
    assert examples.get_int_custom_property(example_gen_utils.SPAN_PROPERTY_NAME) == expected_span
    assert examples.get_string_custom_property(example_gen_utils.FINGERPRINT_PROPERTY_NAME)
    report = ingest_report.read_report(examples.uri)
    assert report["spans"] == [expected_span] and report["documents_read"] == 1


def test_a_span_pattern_without_matching_files_is_named(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "a.txt").write_text("x\n")
    with pytest.raises(CorpusError, match=r"no corpus files for pattern drop-\{SPAN\}/\* under"):
        _run_executor(
            str(tmp_path), str(tmp_path / "out"), ["example_gen.file_pattern='drop-{SPAN}/*'"], pattern="drop-{SPAN}/*"
        )


def test_a_span_range_ingests_every_span_with_files_up_to_the_selected_one(tmp_path):
    """first_span=1 with span 3 selected: spans 1 and 3 are read, the missing span 2 is skipped,
    and span 4 (after the selected one) is not read."""
    for span in (1, 3, 4):
        (tmp_path / f"drop-{span}").mkdir()
        (tmp_path / f"drop-{span}" / "a.txt").write_text(f"Reply from drop {span}.\n\nSecond reply of drop {span}.\n")
    overrides = [
        "example_gen.file_pattern='drop-{SPAN}/*'",
        "example_gen.first_span=1",
        "example_gen.span=3",
        "cleaning.near_dedup=false",
        *NO_CURATION,
    ]
    examples = _run_executor(str(tmp_path), str(tmp_path / "out"), overrides, pattern="drop-{SPAN}/*")
    texts = sorted(_read_texts(examples, "train") + _read_texts(examples, "eval"))
    assert texts == sorted(f"{kind} drop {span}." for span in (1, 3) for kind in ("Reply from", "Second reply of"))
    report = ingest_report.read_report(examples.uri)
    assert report["spans"] == [1, 3] and examples.get_string_custom_property("spans") == "[1, 3]"


def test_a_span_range_must_end_at_or_after_its_first_span():
    with pytest.raises(ValueError, match="first_span"):
        load_config(overrides=["example_gen.first_span=5", "example_gen.span=2"])


def _read_examples(examples):
    files = [
        path
        for split in ("train", "eval")
        for path in tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*.gz"))
    ]
    return [
        tf.train.Example.FromString(record.numpy()).features.feature
        for record in tf.data.TFRecordDataset(files, compression_type="GZIP")
    ]


def _strings(feature):
    return [value.decode("utf-8") for value in feature.bytes_list.value]


TOPICS = [
    "sync on my phone",
    "exporting a PDF",
    "resetting my password",
    "dark mode on the tablet",
    "sharing a notebook with my team",
    "importing Markdown files",
]


def test_executor_reads_conversations_scrubs_every_turn_quarantines_bad_ones_and_records_the_kind(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    good = [
        {
            "messages": [
                {"role": "system", "content": f"Support for ticket {i}; escalate to lead{i}@corp.example.org."},
                {"role": "user", "content": f"I need help with {topic}. Write to me at user{i}@mail.org."},
                {"role": "assistant", "content": f"Happy to help with {topic}; I copied agent{i}@lumen.org."},
            ]
        }
        for i, topic in enumerate(TOPICS)
    ]
    bad = [
        {"messages": [{"role": "user", "content": "Anyone there?"}]},
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "tool", "content": "{}"},
                {"role": "assistant", "content": "Hello"},
            ]
        },
    ]
    with open(corpus / "chats.jsonl", "w", encoding="utf-8") as handle:
        for record in good[:3] + bad + good[3:]:
            handle.write(json.dumps(record) + "\n")
    overrides = [
        "cleaning.quality.enabled=false",
        "cleaning.decontamination.enabled=false",
        "cleaning.near_dedup=false",
    ]
    examples = _run_executor(str(corpus), str(tmp_path / "out"), overrides)
    features = sorted(_read_examples(examples), key=lambda f: _strings(f["text"]))
    assert len(features) == len(good)
    for feature in features:
        assert _strings(feature["roles"]) == ["system", "user", "assistant"]
        contents = _strings(feature["contents"])
        assert all("<EMAIL>" in content and "@" not in content for content in contents)  # scrubbed in every turn
        assert _strings(feature["text"]) == ["\n\n".join(contents)]
        assert feature["assistant_turns"].int64_list.value == [1] and feature["num_turns"].int64_list.value == [3]
    report = ingest_report.read_report(examples.uri)
    assert report["quarantined"] == {"invalid_conversation": 2}
    assert report["samples"]["quarantined:invalid_conversation"] == ["chats.jsonl:4", "chats.jsonl:5"]
    assert report["repaired"] == {"pii_email_scrubbed": len(good)}  # counted once per conversation
    assert (report["data_kind"], report["data_kinds"]) == ("conversations", {"conversations": len(good)})
    assert examples.get_string_custom_property("data_kind") == "conversations"
    assert examples.get_int_custom_property("quarantined_invalid_conversation") == 2
    details = sorted(q["detail"] for q in _quarantine_lines(report["quarantine_dir"], "records"))
    assert details == [
        "messages: no assistant turn",
        "messages: turn 2 has unknown role 'tool' (roles: system, user, assistant)",
    ]
    lines = ingest_report.summary_lines(report)
    assert lines[0] == "documents read: 6, kept: 6 (conversations: roles and contents per turn)"
    assert "quarantined (2): invalid conversation 2" in lines


def test_a_corpus_mixing_plain_text_and_conversations_fails_naming_a_file_of_each(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "notes.txt").write_text(
        "A plain release note about sync.\n\nAnother note about search.\n", encoding="utf-8"
    )
    (corpus / "chats.jsonl").write_text(
        json.dumps({"prompt": "How do I sync?", "completion": "Open Settings > Sync."}) + "\n", encoding="utf-8"
    )
    with pytest.raises(
        CorpusError,
        match=r"the corpus mixes plain-text documents and conversations: 2 plain-text "
        r"documents \(first: notes.txt:1\) and 1 conversation \(first: chats.jsonl:1\)",
    ):
        _run_executor(str(corpus), str(tmp_path / "out"), NO_CURATION)
    examples = _run_executor(str(corpus), str(tmp_path / "only-text"), NO_CURATION, pattern="*.txt")
    assert examples.get_string_custom_property("data_kind") == "text"
