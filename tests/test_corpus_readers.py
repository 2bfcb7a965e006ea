"""Corpus readers: every format, and every kind of bad input with its exact outcome.

Each bad-input test also checks that every good record in the same file is kept.
"""
import bz2
import gzip
import io
import json
import tracemalloc

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.example_gen import byte_stream, records
from components.example_gen.options import ReadOptions
from components.example_gen.readers import CorpusError, Document, Rejection, read_corpus_file


def _write(path, content: bytes) -> str:
    with open(path, "wb") as handle:
        handle.write(content)
    return str(path)


def _read(path, **options):
    outcomes = list(read_corpus_file(path, ReadOptions(**options)))
    documents = [o for o in outcomes if isinstance(o, Document)]
    rejections = [o for o in outcomes if isinstance(o, Rejection)]
    return documents, rejections


def _example(**features) -> bytes:
    feature = {name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value])) for name, value in features.items()}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


# --- formats -------------------------------------------------------------------------------------

def test_txt_documents_are_blank_line_separated_paragraphs(tmp_path):
    path = _write(tmp_path / "a.txt", "Hi Zoë,\nline two\n\n\n  \nSecond doc\r\n\nthird".encode("utf-8"))
    documents, rejections = _read(path)
    assert [d.text for d in documents] == ["Hi Zoë,\nline two", "Second doc", "third"]
    assert [d.line for d in documents] == [1, 6, 8] and rejections == []


@pytest.mark.parametrize("separator, expected", [
    ("line", ["a", "b", "c", "<doc>", "d"]),
    ("<doc>", ["a\nb\n\nc", "d"]),
])
def test_txt_document_separator_is_configurable(tmp_path, separator, expected):
    path = _write(tmp_path / "a.txt", b"a\nb\n\nc\n<doc>\nd\n")
    assert [d.text for d in _read(path, txt_document_separator=separator)[0]] == expected


def test_jsonl_text_field_and_metadata_fields(tmp_path):
    lines = [{"body": "first", "lang": "en", "id": 7}, {"body": "二", "lang": "zh"}]
    path = _write(tmp_path / "b.jsonl", "\n".join(json.dumps(r) for r in lines).encode("utf-8"))
    documents, _ = _read(path, jsonl_text_field="body", metadata_fields=["lang", "id"])
    assert [(d.text, d.metadata) for d in documents] == [
        ("first", (("id", "7"), ("lang", "en"))), ("二", (("lang", "zh"),))]


@pytest.mark.parametrize("name, delimiter", [("c.csv", ","), ("c.tsv", "\t")])
def test_csv_and_tsv_text_column(tmp_path, name, delimiter):
    rows = ["id|body", '1|"multi\nline, quoted"', "2|plain"]
    path = _write(tmp_path / name, "\n".join(rows).replace("|", delimiter).encode("utf-8"))
    documents, _ = _read(path, csv_text_column="body", metadata_fields=("id",))
    assert [(d.text, d.line, d.metadata) for d in documents] == [
        ("multi\nline, quoted", 2, (("id", "1"),)), ("plain", 4, (("id", "2"),))]


def test_tfrecord_of_tf_examples(tmp_path):
    path = str(tmp_path / "d.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(_example(text="héllo".encode("utf-8"), lang=b"fr"))
        writer.write(_example(text=b"world"))
    documents, _ = _read(path, metadata_fields=("lang",))
    assert [(d.text, d.line, d.metadata) for d in documents] == [("héllo", 1, (("lang", "fr"),)), ("world", 2, ())]


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
@pytest.mark.parametrize("fmt", ["txt", "jsonl", "csv", "tfrecord"])
def test_every_format_reads_compressed(tmp_path, fmt, suffix, compress):
    texts = ["alpha beta", "gamma delta"]
    if fmt == "tfrecord":
        plain = str(tmp_path / "plain.tfrecord")
        with tf.io.TFRecordWriter(plain) as writer:
            for text in texts:
                writer.write(_example(text=text.encode("utf-8")))
        content = open(plain, "rb").read()
    else:
        content = {
            "txt": "\n\n".join(texts),
            "jsonl": "\n".join(json.dumps({"text": t}) for t in texts),
            "csv": "text\n" + "\n".join(texts),
        }[fmt].encode("utf-8")
    path = _write(tmp_path / f"corpus.{fmt}{suffix}", compress(content))
    assert [d.text for d in _read(path)[0]] == texts


# --- bad input -----------------------------------------------------------------------------------

GOOD_TXT = b"good one\n\ngood two\n\n"


def test_invalid_utf8_replace_repairs_and_counts(tmp_path):
    path = _write(tmp_path / "u.txt", GOOD_TXT + b"bad \xff byte\n\ngood three\n")
    documents, rejections = _read(path, invalid_utf8="replace")
    assert [d.text for d in documents] == ["good one", "good two", "bad \ufffd byte", "good three"]
    assert [(d.location, d.repairs) for d in documents if d.repairs] == [("u.txt:5", (records.INVALID_UTF8_REPLACED,))]
    assert rejections == []


def test_invalid_utf8_skip_quarantines_the_document(tmp_path):
    path = _write(tmp_path / "u.txt", GOOD_TXT + b"bad \xff byte\n\ngood three\n")
    documents, rejections = _read(path, invalid_utf8="skip")
    assert [d.text for d in documents] == ["good one", "good two", "good three"]
    assert [(r.reason, r.location, r.raw) for r in rejections] == [(records.INVALID_UTF8, "u.txt:5", b"bad \xff byte")]


def test_invalid_utf8_fail_names_file_line_and_byte(tmp_path):
    path = _write(tmp_path / "u.jsonl", b'{"text": "ok"}\n{"text": "\xc3("}\n')
    with pytest.raises(CorpusError, match=r"^u.jsonl:2: invalid UTF-8 at byte 10 of the record \(invalid continuation byte\)$"):
        _read(path, invalid_utf8="fail")


def test_nul_bytes_quarantine_their_record_only(tmp_path):
    path = _write(tmp_path / "n.txt", GOOD_TXT + b"has a \x00 NUL\n\ngood three\n")
    documents, rejections = _read(path)
    assert [d.text for d in documents] == ["good one", "good two", "good three"]
    assert [(r.reason, r.location) for r in rejections] == [(records.NUL_BYTES, "n.txt:5")]


def test_binary_file_is_quarantined_whole(tmp_path):
    path = _write(tmp_path / "image.txt", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64)
    documents, rejections = _read(path, quarantine_sample_bytes=16)
    assert documents == []
    assert [(r.reason, r.line, len(r.raw)) for r in rejections] == [(records.BINARY_FILE, 0, 16)]


def test_empty_file_is_reported(tmp_path):
    documents, rejections = _read(_write(tmp_path / "e.jsonl", b""))
    assert documents == [] and [(r.reason, r.source) for r in rejections] == [(records.EMPTY_FILE, "e.jsonl")]


def test_a_50_mb_line_is_quarantined_in_bounded_memory(tmp_path):
    path = tmp_path / "huge.txt"
    with open(path, "wb") as handle:  # written in 1 MiB pieces: the line is never in memory here
        handle.write(GOOD_TXT)
        for _ in range(50):
            handle.write(b"x" * (1 << 20))
        handle.write(b"\n\ngood three\n")
    tracemalloc.start()
    try:
        documents, rejections = _read(str(path), max_record_bytes=4 << 20, quarantine_sample_bytes=100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [d.text for d in documents] == ["good one", "good two", "good three"]
    assert [(r.reason, r.location, r.raw_size, r.raw) for r in rejections] == [
        (records.RECORD_TOO_LARGE, "huge.txt:5", 50 << 20, b"x" * 100)]
    assert peak < 16 << 20, f"peak Python memory {peak / 2**20:.1f} MiB while reading a 50 MiB line"


def test_truncated_gzip_keeps_the_records_before_the_damage(tmp_path):
    texts = [f"document number {i} " + "word " * (i % 17) for i in range(3000)]
    content = gzip.compress("\n".join(json.dumps({"text": t}) for t in texts).encode("utf-8"))
    path = _write(tmp_path / "t.jsonl.gz", content[: len(content) // 2])
    documents, rejections = _read(path)
    assert 0 < len(documents) < len(texts)
    assert [d.text for d in documents] == texts[: len(documents)]
    assert [(r.reason, r.line) for r in rejections] == [(records.TRUNCATED_COMPRESSED_FILE, len(documents) + 1)]
    assert "GZIP stream is truncated or corrupt" in rejections[0].detail


# bzip2 decompresses whole blocks (100-900 kB of input text), so only the blocks completed before
# the cut can come back: the bz2 case uses 100 kB blocks and enough documents for several.
@pytest.mark.parametrize("suffix, compress, count", [(".gz", gzip.compress, 200),
                                                     (".bz2", lambda data: bz2.compress(data, 1), 3000)])
def test_a_file_cut_in_half_keeps_every_complete_record_before_the_cut(tmp_path, suffix, compress, count):
    """Documents (200 gzip: well under one read chunk) cut at half their compressed size: the
    documents decompressed before the cut are all kept, only the one the cut runs through is lost."""
    texts = [f"support reply {i}: " + " ".join(f"w{(i * 7 + j) % 101}" for j in range(40)) for i in range(count)]
    raw = "\n".join(json.dumps({"text": t}) for t in texts).encode("utf-8")
    content = compress(raw)
    path = _write(tmp_path / f"t.jsonl{suffix}", content[: len(content) // 2])
    documents, rejections = _read(path)
    complete_lines = _decompressed_prefix(content[: len(content) // 2], suffix).count(b"\n")
    assert complete_lines > 20 and len(documents) == complete_lines
    assert [d.text for d in documents] == texts[: len(documents)]
    assert [(r.reason, r.line) for r in rejections] == [(records.TRUNCATED_COMPRESSED_FILE, len(documents) + 1)]


def _decompressed_prefix(data: bytes, suffix: str) -> bytes:
    """What a streaming decompressor gets out of a truncated stream (the reference the test uses)."""
    import zlib

    decompressor = zlib.decompressobj(wbits=31) if suffix == ".gz" else bz2.BZ2Decompressor()
    return decompressor.decompress(data)


def test_gzip_members_one_after_another_are_all_read(tmp_path):
    path = _write(tmp_path / "m.txt.gz", gzip.compress(b"first part.\n\n") + gzip.compress(b"second part.\n"))
    documents, rejections = _read(path)
    assert [d.text for d in documents] == ["first part.", "second part."] and not rejections


def test_corrupt_tfrecord_keeps_the_records_before_the_damage(tmp_path):
    path = str(tmp_path / "c.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(5):
            writer.write(_example(text=f"record {i}".encode()))
    data = bytearray(open(path, "rb").read())
    record_size = len(data) // 5
    data[3 * record_size + 20] ^= 0xFF  # flip a payload byte of the 4th record: its CRC fails
    _write(path, bytes(data))
    documents, rejections = _read(path)
    assert [d.text for d in documents] == ["record 0", "record 1", "record 2"]
    assert [(r.reason, r.line) for r in rejections] == [(records.CORRUPT_TFRECORD, 4)]


def test_malformed_jsonl_lines_and_missing_text_field(tmp_path):
    lines = [b'{"text": "good one"}', b'{"text": oops}', b'["a list"]', b'{"text": 12}', b'{"body": "no text"}',
             b'{"text": "good two"}']
    documents, rejections = _read(_write(tmp_path / "m.jsonl", b"\n".join(lines)))
    assert [d.text for d in documents] == ["good one", "good two"]
    assert [(r.reason, r.line, r.detail) for r in rejections] == [
        (records.MALFORMED_RECORD, 2, "malformed JSON (Expecting value at column 10)"),
        (records.MALFORMED_RECORD, 3, "expected a JSON object, got list"),
        (records.MALFORMED_RECORD, 4, "field 'text' must be a string, got int"),
        (records.MISSING_TEXT_FIELD, 5, "no field 'text'"),
    ]
    assert rejections[0].raw == b'{"text": oops}'


def test_csv_row_with_wrong_field_count_and_header_without_text_column(tmp_path):
    documents, rejections = _read(_write(tmp_path / "r.csv", b"id,text\n1,good one\n2\n3,good two\n"))
    assert [d.text for d in documents] == ["good one", "good two"]
    assert [(r.reason, r.line) for r in rejections] == [(records.MALFORMED_RECORD, 3)]
    with pytest.raises(CorpusError, match=r"^h.csv:1: no column 'text' in the header \(columns: id, body\)$"):
        _read(_write(tmp_path / "h.csv", b"id,body\n1,x\n"))


def test_unsupported_file_type_is_an_error(tmp_path):
    with pytest.raises(CorpusError, match=r"data.parquet: unsupported corpus file type '.parquet'"):
        _read(_write(tmp_path / "data.parquet", b"PAR1"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=2048), fmt=st.sampled_from(["txt", "jsonl", "csv", "tsv", "txt.gz", "tfrecord"]),
       policy=st.sampled_from(["replace", "skip", "fail"]))
def test_arbitrary_bytes_never_crash_a_reader(tmp_path, content, fmt, policy):
    """Any bytes: counted outcomes (documents are valid Unicode, rejections have a known reason) or
    a CorpusError naming the file."""
    path = _write(tmp_path / f"fuzz.{fmt}", content)
    known = {value for name, value in vars(records).items() if name.isupper() and isinstance(value, str)}
    try:
        for outcome in read_corpus_file(path, ReadOptions(invalid_utf8=policy, max_record_bytes=512)):
            if isinstance(outcome, Document):
                outcome.text.encode("utf-8")
            else:
                assert outcome.reason in known
    except CorpusError as error:
        assert str(error).startswith("fuzz.") or str(path) in str(error)


def _reference_lines(content: bytes, max_line_bytes: int, sample_bytes: int):
    """What `bounded_lines` must yield, computed the obvious way (whole input in memory)."""
    pieces = content.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    return [(number, piece[:sample_bytes], len(piece), True) if len(piece) > max_line_bytes
            else (number, piece.rstrip(b"\r"), len(piece), False) for number, piece in enumerate(pieces, 1)]


@settings(max_examples=300, deadline=None)
@given(content=st.binary(max_size=200).map(lambda raw: raw.replace(b"\x01", b"\n").replace(b"\x02", b"\r")),
       chunk_bytes=st.integers(1, 17), max_line_bytes=st.integers(1, 40), sample_bytes=st.integers(0, 8))
def test_line_splitting_does_not_depend_on_chunk_boundaries(content, chunk_bytes, max_line_bytes, sample_bytes):
    """Lines that straddle chunks, CRLF, oversized lines: same lines whatever the chunk size.
    (The quarantine sample is shorter than the line limit, as with the real options.)"""
    sample_bytes = min(sample_bytes, max_line_bytes)
    lines = byte_stream.bounded_lines(io.BytesIO(content), max_line_bytes, sample_bytes, chunk_bytes)
    assert [tuple(line) for line in lines] == _reference_lines(content, max_line_bytes, sample_bytes)
