"""The data gate: real TFDV statistics of real examples, validated against the curated schema."""

import itertools
import json
import os

import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv
from tfx.types import standard_artifacts

from components.data_gate.anomalies import blocking_anomalies, parse_anomalies
from components.data_gate.component import STAGES, gate_verdict
from components.data_gate.options import DataGateOptions
from components.data_gate.schema_import import CuratedSchemaExecutor
from components.example_gen.executor import document_to_example
from components.example_gen.readers import Document, read_corpus_file
from components.resources import resolve
from components.tokenizer import loaded
from components.transform.preprocessing import count_forbidden
from components.transform.token_schema import schema_for_tokenizer
from pipeline.config import PipelineConfig
from pipeline.layout import conversation_schema_file, schema_files


def _anomalies_for(documents, tmp_path, schema_file=None):
    path = str(tmp_path / "examples.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for document in documents:
            writer.write(document_to_example(document).SerializeToString())
    statistics = tfdv.generate_statistics_from_tfrecord(path, pipeline_options=None)
    schema = tfdv.load_schema_text(resolve(schema_file or schema_files(PipelineConfig().schema_dir)[0]))
    return parse_anomalies(tfdv.validate_statistics(statistics, schema), "train")


HF_TOKENIZERS = os.path.join(os.path.dirname(__file__), "fixtures", "hf", "tokenizers")
GOOD = [Document(f"Hello {i},\nthanks for writing.", "a.txt", i) for i in range(20)]


def test_clean_corpus_passes_the_gate(tmp_path):
    anomalies = _anomalies_for(GOOD, tmp_path)
    assert anomalies == []
    assert blocking_anomalies(anomalies, []) == []


def test_missing_text_feature_blocks(tmp_path):
    anomalies = _anomalies_for(GOOD + [Document(None, "b.jsonl", 1)], tmp_path)
    blocking = blocking_anomalies(anomalies, [])
    assert {a.feature for a in blocking} >= {"text"}
    assert any("FEATURE_TYPE_LOW_FRACTION_PRESENT" in a.types for a in blocking if a.feature == "text")


def test_empty_documents_violate_the_length_domain_and_block(tmp_path):
    anomalies = _anomalies_for(GOOD + [Document("", "b.jsonl", 1)], tmp_path)
    blocking = blocking_anomalies(anomalies, [])
    assert [a.feature for a in blocking] == ["num_chars"]
    assert "out-of-range" in str(blocking[0]).lower() or "out of range" in str(blocking[0]).lower()


def test_allowed_anomaly_types_only_warn(tmp_path):
    anomalies = _anomalies_for(GOOD + [Document("", "b.jsonl", 1)], tmp_path)
    assert anomalies and blocking_anomalies(anomalies, anomalies[0].types) == []


def _token_data_anomalies(serialized_examples, tmp_path, tokenizer):
    """TFDV's anomalies in token data against the transformed schema written for `tokenizer`."""
    path = str(tmp_path / "transformed.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in serialized_examples:
            writer.write(record)
    statistics = tfdv.generate_statistics_from_tfrecord(path, pipeline_options=None)
    curated_path = resolve(schema_files(PipelineConfig().schema_dir)[1])
    schema = schema_for_tokenizer(tfdv.load_schema_text(curated_path), tokenizer, curated_path)
    return parse_anomalies(tfdv.validate_statistics(statistics, schema), "train")


def _transformed_example(token_ids, tokenizer, byte_fraction=0.5, bytes_per_token=2.0):
    """A transformed example as Transform writes it for `tokenizer` (its special-token count included)."""
    special_count = count_forbidden(tf.ragged.constant([token_ids], dtype=tf.int64), tokenizer.document_forbidden_ids())
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "token_ids$ragged_values": tf.train.Feature(int64_list=tf.train.Int64List(value=token_ids)),
                "num_tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=[len(token_ids)])),
                "byte_token_fraction": tf.train.Feature(float_list=tf.train.FloatList(value=[byte_fraction])),
                "bytes_per_token": tf.train.Feature(float_list=tf.train.FloatList(value=[bytes_per_token])),
                "special_tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=special_count.numpy().tolist())),
            }
        )
    ).SerializeToString()


@pytest.fixture(scope="module")
def tokenizers(tokenizer_model):
    """The two kinds: the learned SentencePiece layout ([PAD] [EOS] [UNK] = 0-2) and GPT-2's
    (bytes first: '!' '"' '#' are ids 0-2; <|endoftext|> last, 511)."""
    return {
        "learned": loaded.load(tokenizer_model),
        "gpt2": loaded.load(os.path.join(HF_TOKENIZERS, "gpt2_bpe")),
        "llama": loaded.load(os.path.join(HF_TOKENIZERS, "llama_sp")),
    }


def test_real_transformed_examples_pass_the_token_gate(transform_artifacts, tokenizer_model, tmp_path):
    records = [
        r.numpy() for r in tf.data.TFRecordDataset(tf.io.gfile.glob(transform_artifacts[1]), compression_type="GZIP")
    ]
    assert records and _token_data_anomalies(records, tmp_path, loaded.load(tokenizer_model)) == []


def test_unknown_tokens_and_empty_token_sequences_block_the_token_gate(tokenizers, tmp_path):
    learned = tokenizers["learned"]
    good = [_transformed_example([300, 301, 302], learned) for _ in range(10)]
    anomalies = _token_data_anomalies(
        good + [_transformed_example([300, 2], learned), _transformed_example([], learned)], tmp_path, learned
    )
    assert {a.feature for a in blocking_anomalies(anomalies, [])} == {"special_tokens", "num_tokens"}


def test_ids_0_to_2_pass_where_they_are_ordinary_bytes_and_a_special_id_still_blocks(tokenizers, tmp_path):
    gpt2 = tokenizers["gpt2"]
    assert gpt2.graph().tokenize(tf.constant(['!"#'])).to_list() == [[0, 1, 2]]
    documents = [_transformed_example([0, 1, 2, 300 + i], gpt2) for i in range(10)]
    assert _token_data_anomalies(documents, tmp_path, gpt2) == []
    # The same ids where they are the learned tokenizer's [PAD] [EOS] [UNK]: refused.
    learned = tokenizers["learned"]
    blocking = blocking_anomalies(
        _token_data_anomalies(
            [_transformed_example([0, 1, 2, 300 + i], learned) for i in range(10)], tmp_path, learned
        ),
        [],
    )
    assert [a.feature for a in blocking] == ["special_tokens"]
    # GPT-2's <|endoftext|> (the separator the pipeline places between documents) inside a document: refused.
    eos = gpt2.special.eos_id
    blocking = blocking_anomalies(
        _token_data_anomalies(documents + [_transformed_example([5, eos, 6], gpt2)], tmp_path, gpt2), []
    )
    assert [a.feature for a in blocking] == ["special_tokens"]
    error, _ = gate_verdict(blocking, DataGateOptions(), stage=STAGES["tokens"])
    assert error.startswith(
        "token gate (after Transform): stopping before the Trainer: 1 blocking anomaly in the "
        "token data:\n  - [train] special_tokens: "
    )


def test_an_id_outside_the_vocabulary_blocks_the_token_gate(tokenizers, tmp_path):
    gpt2 = tokenizers["gpt2"]
    documents = [_transformed_example([0, 1, 2, 300 + i], gpt2) for i in range(10)]
    blocking = blocking_anomalies(
        _token_data_anomalies(documents + [_transformed_example([5, 512], gpt2)], tmp_path, gpt2), []
    )
    assert [a.feature for a in blocking] == ["token_ids$ragged_values"]
    assert "512" in blocking[0].description


def test_a_checkpoint_tokenizers_dummy_prefix_may_take_a_document_under_one_byte_per_token(tokenizers, tmp_path):
    """Korean through the Llama fixture (a vocabulary learned on English with a little CJK, no
    Hangul: one byte-fallback token per byte) plus its dummy-prefix '▁': under one byte per token,
    which the TokenGate lets through for a checkpoint tokenizer (down to 0.5) and still refuses from
    the learned one. (Found fine-tuning that fixture on a Chinese corpus: the run stopped at the
    TokenGate with 0.978 bytes per token.)"""
    llama, learned = tokenizers["llama"], tokenizers["learned"]
    text = "봄잠에 새벽을 깨닫지 못하니"
    token_ids = llama.graph().tokenize(tf.constant([text])).to_list()[0]
    bytes_per_token = len(text.encode("utf-8")) / len(token_ids)
    assert 0.9 < bytes_per_token < 1.0  # 39 bytes, 40 tokens: the premise of the test
    documents = [_transformed_example([300 + i, 301], llama) for i in range(10)]
    korean = _transformed_example(token_ids, llama, byte_fraction=0.97, bytes_per_token=bytes_per_token)
    assert _token_data_anomalies(documents + [korean], tmp_path, llama) == []
    learned_documents = [_transformed_example([300 + i, 301], learned) for i in range(10)]
    blocking = blocking_anomalies(
        _token_data_anomalies(
            learned_documents + [_transformed_example([300, 301], learned, bytes_per_token=bytes_per_token)],
            tmp_path,
            learned,
        ),
        [],
    )
    assert [a.feature for a in blocking] == ["bytes_per_token"]
    # Below what one added token beside a one-byte document gives: refused for the checkpoint too.
    blocking = blocking_anomalies(
        _token_data_anomalies(
            documents + [_transformed_example([300, 301, 302], llama, bytes_per_token=0.4)], tmp_path, llama
        ),
        [],
    )
    assert [a.feature for a in blocking] == ["bytes_per_token"]


def test_the_token_schema_is_written_for_the_tokenizer(tokenizers, tmp_path):
    """TokenSchemaGen (the TransformedSchemaGen node) writes the curated schema with the id range."""
    from tfx.types import standard_artifacts

    from components.tokenizer.component import Tokenizer
    from components.transform.token_schema import TokenSchemaGen

    tokenizer_artifact = Tokenizer()
    tokenizer_artifact.uri = str(tmp_path / "tokenizer")
    tokenizers["gpt2"].write(tokenizer_artifact.uri)
    schema_artifact = standard_artifacts.Schema()
    schema_artifact.uri = str(tmp_path / "schema")
    executor = TokenSchemaGen.EXECUTOR_SPEC.executor_class()
    executor.Do(
        {"tokenizer": [tokenizer_artifact]},
        {"schema": [schema_artifact]},
        {"schema_file": schema_files(PipelineConfig().schema_dir)[1]},
    )
    written = tfdv.load_schema_text(os.path.join(schema_artifact.uri, "schema.pbtxt"))
    domain = tfdv.get_feature(written, "token_ids$ragged_values").int_domain
    assert (domain.min, domain.max) == (0, 511)
    special_count = tfdv.get_feature(written, "special_tokens").int_domain
    assert (special_count.min, special_count.max) == (0, 0)
    assert tfdv.get_feature(written, "bytes_per_token").float_domain.min == 0.5  # a checkpoint tokenizer's


def test_a_few_symbolic_documents_are_tolerated_but_a_symbolic_corpus_blocks(tmp_path):
    """The schema lets at most 5% of documents fall outside 'prose' (TFDV min_domain_mass)."""
    table = Document("| 12 | 34.5 | 0x1F |\n|----|------|------|", "t.txt", 1)
    assert _anomalies_for(GOOD + [table], tmp_path) == []  # 1 in 21: under 5%
    blocking = blocking_anomalies(_anomalies_for(GOOD + [table] * 4, tmp_path), [])  # 4 in 24
    assert [a.feature for a in blocking] == ["content_class"]
    assert "symbolic" in blocking[0].description


def test_whitespace_only_documents_count_as_blank_against_the_empty_rate(tmp_path):
    blocking = blocking_anomalies(
        _anomalies_for(GOOD + [Document(" \n\t ", "b.jsonl", i) for i in range(3)], tmp_path), []
    )
    assert [a.feature for a in blocking] == ["content_class"] and "blank" in blocking[0].description


def _ingest_report(read, kept, removed, bytes_read=None, bytes_kept=None):
    """An ingest report as ExampleGen writes it (the parts the removal check reads)."""
    report = {
        "documents_read": read,
        "documents_kept": kept,
        "removed": removed,
        "removed_examples": {
            rule: {"location": f"poems.jsonl:{index + 1}", "text": f"an example {rule} removed"}
            for index, rule in enumerate(removed)
        },
    }
    if bytes_read is not None:
        report.update(bytes_read=bytes_read, bytes_kept=bytes_kept)
    return report


MOSTLY_REMOVED = _ingest_report(
    3000, 1, {"quality_short_lines": 2990, "quality_stop_words": 6, "exact_duplicate": 2, "too_short": 1}, 600_000, 150
)


def test_cleaning_that_removes_most_of_a_span_blocks_naming_the_rules_with_counts_and_an_example():
    error, finding = gate_verdict([], DataGateOptions(), MOSTLY_REMOVED)
    assert finding.documents_fraction > 0.99 and finding.bytes_fraction > 0.99
    assert error.startswith(
        "data gate: stopping before the Tokenizer and Transform: cleaning removed 100.0% of the documents"
    )
    assert '- quality_short_lines: 2990 (e.g. poems.jsonl:1: "an example quality_short_lines removed")' in error
    assert "- quality_stop_words: 6" in error and "- exact_duplicate: 2" in error
    assert "too_short" not in error  # the three rules that removed the most
    assert "data_gate.max_removed_fraction=0.3" in error and "data_gate.removal_action=warn" in error


def test_cleaning_within_the_limit_passes_and_warn_lets_too_much_removal_through_with_the_finding():
    assert gate_verdict(
        [], DataGateOptions(), _ingest_report(2100, 2000, {"exact_duplicate": 100}, 660_000, 630_000)
    ) == (None, None)
    assert gate_verdict([], DataGateOptions(), None) == (None, None)  # the token gate: no ingest report
    error, finding = gate_verdict([], DataGateOptions(removal_action="warn"), MOSTLY_REMOVED)
    assert error is None and "quality_short_lines: 2990" in finding.message()
    assert gate_verdict([], DataGateOptions(max_removed_fraction=1.0), MOSTLY_REMOVED) == (None, None)


def test_removing_most_of_the_bytes_blocks_even_when_most_documents_are_kept():
    few_long_ones = _ingest_report(100, 90, {"quality_duplicate_line_chars": 10}, 1_000_000, 300_000)
    error, finding = gate_verdict([], DataGateOptions(), few_long_ones)
    assert finding.documents_fraction == pytest.approx(0.1) and finding.bytes_fraction == pytest.approx(0.7)
    assert "70.0% of the bytes" in error


def test_a_removal_finding_and_blocking_anomalies_are_reported_together(tmp_path):
    anomalies = _anomalies_for(GOOD + [Document("", "b.jsonl", 1)], tmp_path)
    error, _ = gate_verdict(anomalies, DataGateOptions(removal_action="warn"), MOSTLY_REMOVED)
    assert "blocking anomal" in error and "cleaning removed" not in error  # warn: the finding is not a reason
    error, _ = gate_verdict(anomalies, DataGateOptions(), MOSTLY_REMOVED)
    assert "cleaning removed" in error and "num_chars" in error


# --- conversations ---------------------------------------------------------------------------------

CONVERSATION_SCHEMA = conversation_schema_file(PipelineConfig().schema_dir)
BUNDLED_CONVERSATIONS = "bundled:data/instructions/support_conversations.jsonl"


def _chat(line, *turns):
    return Document(None, "chats.jsonl", line).with_turns(turns)


GOOD_CHATS = [
    _chat(i, ("user", f"Ticket {i}: my notes do not sync."), ("assistant", f"Reply {i}: open Settings > Sync."))
    for i in range(20)
]


def test_the_conversation_schema_keeps_every_feature_of_the_text_schema_unchanged():
    text = tfdv.load_schema_text(resolve(schema_files(PipelineConfig().schema_dir)[0]))
    conversations = tfdv.load_schema_text(resolve(CONVERSATION_SCHEMA))
    features = {feature.name: feature for feature in conversations.feature}
    assert all(features[feature.name] == feature for feature in text.feature)
    assert set(features) - {feature.name for feature in text.feature} == {
        "roles",
        "contents",
        "num_turns",
        "assistant_turns",
        "assistant_chars",
        "prompt_chars",
    }


def test_the_conversation_schema_accepts_the_bundled_conversations(tmp_path):
    documents = [
        outcome for outcome in read_corpus_file(resolve(BUNDLED_CONVERSATIONS)) if isinstance(outcome, Document)
    ]
    assert len(documents) == 3000 and all(document.is_conversation for document in documents)
    assert _anomalies_for(documents, tmp_path, CONVERSATION_SCHEMA) == []


def test_the_conversation_schema_rejects_an_unknown_role_and_a_conversation_without_a_reply(tmp_path):
    """ExampleGen quarantines both; the schema is the second line of defence for examples written
    by anything else (TFDV sees only the statistics)."""
    assert _anomalies_for(GOOD_CHATS, tmp_path, CONVERSATION_SCHEMA) == []
    tool = _chat(30, ("user", "Look it up."), ("tool", "{}"), ("assistant", "Done."))
    blocking = blocking_anomalies(_anomalies_for(GOOD_CHATS + [tool], tmp_path, CONVERSATION_SCHEMA), [])
    assert [(a.feature, a.types) for a in blocking] == [("roles", ["ENUM_TYPE_UNEXPECTED_STRING_VALUES"])]
    assert "tool" in blocking[0].description
    unanswered = _chat(31, ("system", "Be brief."), ("user", "Anyone there?"))
    blocking = blocking_anomalies(_anomalies_for(GOOD_CHATS + [unanswered], tmp_path, CONVERSATION_SCHEMA), [])
    assert {a.feature for a in blocking} == {"assistant_turns", "assistant_chars"}
    assert all(a.types == ["INT_TYPE_SMALL_INT"] for a in blocking)


def test_the_text_schema_refuses_conversations_so_the_kinds_cannot_be_mixed_up(tmp_path):
    blocking = blocking_anomalies(_anomalies_for(GOOD_CHATS, tmp_path), [])
    assert {a.feature for a in blocking} >= {"roles", "contents"}
    assert all("SCHEMA_NEW_COLUMN" in a.types for a in blocking if a.feature in ("roles", "contents"))


def _import_schema(tmp_path, examples=None, conversation_schema=CONVERSATION_SCHEMA):
    schema = standard_artifacts.Schema()
    schema.uri = str(tmp_path / "schema")
    properties = {
        "schema_file": schema_files(PipelineConfig().schema_dir)[0],
        "conversation_schema_file": conversation_schema,
    }
    CuratedSchemaExecutor().Do(
        {"examples": [examples]} if examples is not None else {}, {"schema": [schema]}, properties
    )
    return schema, tfdv.load_schema_text(os.path.join(schema.uri, "schema.pbtxt"))


def _examples(tmp_path, name, property_kind=None, report_kind=None):
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / name)
    os.makedirs(examples.uri)
    if property_kind:
        examples.set_string_custom_property("data_kind", property_kind)
    if report_kind:
        with open(os.path.join(examples.uri, "ingest_report.json"), "w") as handle:
            json.dump({"data_kind": report_kind}, handle)
    return examples


def test_the_schema_import_picks_the_schema_of_the_examples_kind_at_run_time(tmp_path):
    outputs = itertools.count()

    def imported(examples):
        schema, proto = _import_schema(tmp_path / f"out-{next(outputs)}", examples)
        return schema.get_string_custom_property("data_kind"), "roles" in {f.name for f in proto.feature}

    assert imported(_examples(tmp_path, "chats", property_kind="conversations")) == ("conversations", True)
    # A runner that carries no custom properties: the ingest report in the artifact's directory says it.
    assert imported(_examples(tmp_path, "chats-file", report_kind="conversations")) == ("conversations", True)
    assert imported(_examples(tmp_path, "text", property_kind="text")) == ("text", False)
    assert imported(_examples(tmp_path, "older")) == ("text", False)  # Examples from before conversations
    assert imported(None) == ("text", False)  # the token data's import has no Examples
    with pytest.raises(
        FileNotFoundError,
        match=r"the examples hold conversations .*/nowhere/conversation_schema.pbtxt "
        r"does not exist",
    ):
        _import_schema(
            tmp_path / "missing",
            _examples(tmp_path, "chats-2", property_kind="conversations"),
            conversation_schema=str(tmp_path / "nowhere" / "conversation_schema.pbtxt"),
        )
