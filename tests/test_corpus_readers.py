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


@pytest.mark.parametrize(
    "separator, expected",
    [
        ("line", ["a", "b", "c", "<doc>", "d"]),
        ("<doc>", ["a\nb\n\nc", "d"]),
    ],
)
def test_txt_document_separator_is_configurable(tmp_path, separator, expected):
    path = _write(tmp_path / "a.txt", b"a\nb\n\nc\n<doc>\nd\n")
    assert [d.text for d in _read(path, txt_document_separator=separator)[0]] == expected


def test_jsonl_text_field_and_metadata_fields(tmp_path):
    lines = [{"body": "first", "lang": "en", "id": 7}, {"body": "二", "lang": "zh"}]
    path = _write(tmp_path / "b.jsonl", "\n".join(json.dumps(r) for r in lines).encode("utf-8"))
    documents, _ = _read(path, jsonl_text_field="body", metadata_fields=["lang", "id"])
    assert [(d.text, d.metadata) for d in documents] == [
        ("first", (("id", "7"), ("lang", "en"))),
        ("二", (("lang", "zh"),)),
    ]


@pytest.mark.parametrize("name, delimiter", [("c.csv", ","), ("c.tsv", "\t")])
def test_csv_and_tsv_text_column(tmp_path, name, delimiter):
    rows = ["id|body", '1|"multi\nline, quoted"', "2|plain"]
    path = _write(tmp_path / name, "\n".join(rows).replace("|", delimiter).encode("utf-8"))
    documents, _ = _read(path, csv_text_column="body", metadata_fields=("id",))
    assert [(d.text, d.line, d.metadata) for d in documents] == [
        ("multi\nline, quoted", 2, (("id", "1"),)),
        ("plain", 4, (("id", "2"),)),
    ]


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
    with pytest.raises(
        CorpusError, match=r"^u.jsonl:2: invalid UTF-8 at byte 10 of the record \(invalid continuation byte\)$"
    ):
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
        (records.RECORD_TOO_LARGE, "huge.txt:5", 50 << 20, b"x" * 100)
    ]
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
@pytest.mark.parametrize(
    "suffix, compress, count", [(".gz", gzip.compress, 200), (".bz2", lambda data: bz2.compress(data, 1), 3000)]
)
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
    lines = [
        b'{"text": "good one"}',
        b'{"text": oops}',
        b'["a list"]',
        b'{"text": 12}',
        b'{"body": "no text"}',
        b'{"text": "good two"}',
    ]
    documents, rejections = _read(_write(tmp_path / "m.jsonl", b"\n".join(lines)))
    assert [d.text for d in documents] == ["good one", "good two"]
    assert [(r.reason, r.line, r.detail) for r in rejections] == [
        (records.MALFORMED_RECORD, 2, "malformed JSON (Expecting value at column 10)"),
        (records.MALFORMED_RECORD, 3, "expected a JSON object, got list"),
        (records.MALFORMED_RECORD, 4, "field 'text' must be a string, got int"),
        (
            records.MISSING_TEXT_FIELD,
            5,
            "no field 'text', nor the fields of a conversation (messages, contents, "
            "instruction+output, prompt+completion, input+output)",
        ),
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
@given(
    content=st.binary(max_size=2048),
    fmt=st.sampled_from(["txt", "jsonl", "csv", "tsv", "txt.gz", "tfrecord"]),
    policy=st.sampled_from(["replace", "skip", "fail"]),
)
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
    return [
        (number, piece[:sample_bytes], len(piece), True)
        if len(piece) > max_line_bytes
        else (number, piece.rstrip(b"\r"), len(piece), False)
        for number, piece in enumerate(pieces, 1)
    ]


@settings(max_examples=300, deadline=None)
@given(
    content=st.binary(max_size=200).map(lambda raw: raw.replace(b"\x01", b"\n").replace(b"\x02", b"\r")),
    chunk_bytes=st.integers(1, 17),
    max_line_bytes=st.integers(1, 40),
    sample_bytes=st.integers(0, 8),
)
def test_line_splitting_does_not_depend_on_chunk_boundaries(content, chunk_bytes, max_line_bytes, sample_bytes):
    """Lines that straddle chunks, CRLF, oversized lines: same lines whatever the chunk size.
    (The quarantine sample is shorter than the line limit, as with the real options.)"""
    sample_bytes = min(sample_bytes, max_line_bytes)
    lines = byte_stream.bounded_lines(io.BytesIO(content), max_line_bytes, sample_bytes, chunk_bytes)
    assert [tuple(line) for line in lines] == _reference_lines(content, max_line_bytes, sample_bytes)


# --- conversations (instruction data) ------------------------------------------------------------

EMOJI_REPLY = "Gern geschehen, Zoë! Öffnen Sie Einstellungen > Sync. \U0001f642"
CHINESE_REQUEST = "同步失败了，怎么办？"

# (record, the canonical turns it reads as, its format) for every instruction-data format.
CONVERSATION_FORMATS = [
    pytest.param(
        {
            "messages": [
                {"role": "system", "content": "You are Lumen Notes support."},
                {"role": "user", "content": CHINESE_REQUEST},
                {"role": "assistant", "content": EMOJI_REPLY},
            ]
        },
        [("system", "You are Lumen Notes support."), ("user", CHINESE_REQUEST), ("assistant", EMOJI_REPLY)],
        "messages",
        id="messages",
    ),
    pytest.param(
        {"prompt": CHINESE_REQUEST, "completion": EMOJI_REPLY},
        [("user", CHINESE_REQUEST), ("assistant", EMOJI_REPLY)],
        "prompt_completion",
        id="prompt_completion",
    ),
    pytest.param(
        {
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": CHINESE_REQUEST}],
            "completion": [{"role": "assistant", "content": EMOJI_REPLY}],
        },
        [("system", "Be brief."), ("user", CHINESE_REQUEST), ("assistant", EMOJI_REPLY)],
        "prompt_completion",
        id="prompt_completion_conversational",
    ),
    pytest.param(
        {"instruction": "Translate to German:", "input": "You're welcome, Zoë! \U0001f642", "output": EMOJI_REPLY},
        [("user", "Translate to German:\n\nYou're welcome, Zoë! \U0001f642"), ("assistant", EMOJI_REPLY)],
        "alpaca",
        id="alpaca",
    ),
    pytest.param(
        {"instruction": CHINESE_REQUEST, "input": "  ", "output": EMOJI_REPLY},
        [("user", CHINESE_REQUEST), ("assistant", EMOJI_REPLY)],
        "alpaca",
        id="alpaca_blank_input",
    ),
    pytest.param(
        {
            "systemInstruction": {"role": "system", "parts": [{"text": "You are "}, {"text": "Lumen Notes support."}]},
            "contents": [
                {"role": "user", "parts": [{"text": CHINESE_REQUEST}]},
                {
                    "role": "model",
                    "parts": [
                        {"text": "Gern geschehen, Zoë! "},
                        {"text": "Öffnen Sie Einstellungen > Sync. \U0001f642"},
                    ],
                },
            ],
        },
        [("system", "You are Lumen Notes support."), ("user", CHINESE_REQUEST), ("assistant", EMOJI_REPLY)],
        "vertex",
        id="vertex",
    ),
    pytest.param(
        {"system": "You are Lumen Notes support.", "input": CHINESE_REQUEST, "output": EMOJI_REPLY},
        [("system", "You are Lumen Notes support."), ("user", CHINESE_REQUEST), ("assistant", EMOJI_REPLY)],
        "nemo",
        id="nemo",
    ),
]


def _jsonl(path, *objects) -> str:
    return _write(path, b"".join(json.dumps(o, ensure_ascii=False).encode("utf-8") + b"\n" for o in objects))


@pytest.mark.parametrize("record, turns, fmt", CONVERSATION_FORMATS)
def test_each_instruction_format_reads_as_canonical_turns_detected_or_forced(tmp_path, record, turns, fmt):
    path = _jsonl(tmp_path / "chats.jsonl", dict(record, id=7))
    for conversation_format in ("auto", fmt):
        documents, rejections = _read(path, conversation_format=conversation_format, metadata_fields=["id"])
        assert rejections == [] and len(documents) == 1
        document = documents[0]
        assert document.turns == tuple(turns) and document.kind == records.CONVERSATIONS_KIND
        assert document.text == "\n\n".join(content for _, content in turns)  # no role names in the text
        assert (document.source, document.line, document.metadata) == ("chats.jsonl", 1, (("id", "7"),))


def test_a_conversation_beside_a_rendered_text_field_is_read_as_the_conversation(tmp_path):
    """Alpaca exports carry the rendered prompt as `text`; `conversation_format: text` keeps today's reading."""
    record = {
        "instruction": "Say hi.",
        "input": "",
        "output": "Hi!",
        "text": "### Instruction: Say hi. ### Response: Hi!",
    }
    path = _jsonl(tmp_path / "alpaca.jsonl", record, {"text": "A plain document."})
    documents, _ = _read(path)
    assert [d.turns for d in documents] == [(("user", "Say hi."), ("assistant", "Hi!")), ()]
    documents, _ = _read(path, conversation_format="text")
    assert [(d.text, d.turns) for d in documents] == [(record["text"], ()), ("A plain document.", ())]


def test_conversation_format_text_keeps_quarantining_records_without_a_text_field(tmp_path):
    path = _jsonl(
        tmp_path / "m.jsonl",
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
    )
    _, rejections = _read(path, conversation_format="text")
    assert [(r.reason, r.detail) for r in rejections] == [(records.MISSING_TEXT_FIELD, "no field 'text'")]
    _, rejections = _read(_jsonl(tmp_path / "b.jsonl", {"body": "x"}))
    assert rejections[0].reason == records.MISSING_TEXT_FIELD
    assert rejections[0].detail.startswith("no field 'text', nor the fields of a conversation (messages, contents, ")


USER, REPLY = (
    {"role": "user", "content": "My notes do not sync."},
    {"role": "assistant", "content": "Open Settings > Sync."},
)

# (record, forced format or None for auto, the detail naming the problem)
INVALID_CONVERSATIONS = [
    pytest.param({"messages": [USER]}, None, "messages: no assistant turn", id="no_assistant_turn"),
    pytest.param(
        {"messages": [USER, {"role": "tool", "content": "{}"}, REPLY]},
        None,
        "messages: turn 2 has unknown role 'tool' (roles: system, user, assistant)",
        id="unknown_role",
    ),
    pytest.param(
        {"messages": [USER, {"role": "assistant", "content": " \n\u200b"}]},
        None,
        "messages: turn 2 (assistant) is empty",
        id="empty_assistant_content",
    ),
    pytest.param(
        {"messages": [USER, {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]},
        None,
        "messages: turn 2 content is a list, not a string",
        id="non_string_content",
    ),
    pytest.param(
        {"messages": [USER, {"role": "assistant"}]}, None, "messages: turn 2 content is missing", id="missing_content"
    ),
    pytest.param({"messages": []}, None, "messages: no turns (an empty list of messages)", id="empty_messages"),
    pytest.param(
        {"messages": [USER, "Open Settings > Sync."]},
        None,
        "messages: turn 2 is a string, not an object",
        id="turn_not_an_object",
    ),
    pytest.param({"messages": "hello"}, None, "messages: 'messages' is a string, not a list", id="messages_not_a_list"),
    pytest.param(
        {"prompt": "Hi", "completion": [REPLY]},
        None,
        "prompt_completion: 'prompt' is a string and 'completion' is a list: both must be strings, or both "
        "lists of messages",
        id="prompt_and_completion_of_two_forms",
    ),
    pytest.param(
        {"prompt": [USER], "completion": [USER]},
        None,
        "prompt_completion: completion turn 1 has role 'user': a completion holds assistant turns only",
        id="completion_with_a_user_turn",
    ),
    pytest.param({"prompt": "Hi"}, None, "prompt_completion: no field 'completion'", id="prompt_without_completion"),
    pytest.param(
        {"instruction": "Say hi.", "output": ""}, None, "alpaca: turn 2 (assistant) is empty", id="alpaca_empty_output"
    ),
    pytest.param(
        {
            "contents": [
                {"role": "user", "parts": [{"text": "Hi"}]},
                {"role": "assistant", "parts": [{"text": "Hello"}]},
            ]
        },
        None,
        "vertex: contents item 2 has unknown role 'assistant' (Vertex roles: user, model)",
        id="vertex_role",
    ),
    pytest.param(
        {
            "contents": [
                {"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": ""}}]},
                {"role": "model", "parts": [{"text": "A cat."}]},
            ]
        },
        None,
        "vertex: contents item 1 part 1 has no 'text' (only text parts are read)",
        id="vertex_non_text_part",
    ),
    pytest.param({"input": "Hi", "output": 3}, None, "nemo: 'output' is a number, not a string", id="nemo_non_string"),
    pytest.param(
        {"messages": [USER, REPLY]}, "alpaca", "alpaca: no field 'instruction'", id="forced_format_fields_missing"
    ),
]


@pytest.mark.parametrize("record, forced, detail", INVALID_CONVERSATIONS)
def test_an_invalid_conversation_is_quarantined_with_its_reason_and_the_good_ones_kept(
    tmp_path, record, forced, detail
):
    good = {"instruction": "Say hi.", "output": "Hi!"} if forced == "alpaca" else {"messages": [USER, REPLY]}
    path = _jsonl(tmp_path / "chats.jsonl", good, record, good)
    documents, rejections = _read(path, **({"conversation_format": forced} if forced else {}))
    assert [d.line for d in documents] == [1, 3]
    assert [(r.reason, r.line, r.detail) for r in rejections] == [(records.INVALID_CONVERSATION, 2, detail)]
    assert json.loads(rejections[0].raw) == record


def test_a_lone_surrogate_in_a_turn_is_repaired_or_quarantined_by_the_utf8_policy(tmp_path):
    path = _write(
        tmp_path / "s.jsonl",
        b'{"messages": [{"role": "user", "content": "bad \\ud800 char"}, {"role": "assistant", "content": "ok"}]}\n',
    )
    documents, _ = _read(path)
    assert documents[0].turns[0] == ("user", "bad \ufffd\ufffd\ufffd char")  # each byte of the surrogate replaced
    assert documents[0].repairs == (records.INVALID_UTF8_REPLACED,)
    _, rejections = _read(path, invalid_utf8="skip")
    assert [(r.reason, r.detail) for r in rejections] == [(records.INVALID_UTF8, "turn 1 (user) is not valid Unicode")]


def test_a_forced_conversation_format_refuses_files_that_cannot_hold_conversations(tmp_path):
    path = _write(tmp_path / "notes.txt", b"A plain document.\n")
    with pytest.raises(
        CorpusError, match=r"notes.txt: example_gen.conversation_format=messages reads .jsonl files only, not '.txt'"
    ):
        list(read_corpus_file(path, ReadOptions(conversation_format="messages")))
    assert [d.text for d in _read(path)[0]] == ["A plain document."]  # auto: a .txt file is plain text


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["role", "content", "parts", "text", "messages"]), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    record=st.dictionaries(
        st.sampled_from(
            [
                "messages",
                "prompt",
                "completion",
                "instruction",
                "input",
                "output",
                "contents",
                "systemInstruction",
                "system",
                "text",
            ]
        ),
        _JSON,
        max_size=4,
    ),
    fmt=st.sampled_from(["auto", "messages", "prompt_completion", "alpaca", "vertex", "nemo"]),
)
def test_any_json_record_reads_as_a_valid_conversation_or_a_counted_rejection(tmp_path, record, fmt):
    path = _jsonl(tmp_path / "fuzz.jsonl", record)
    known = {value for name, value in vars(records).items() if name.isupper() and isinstance(value, str)}
    for outcome in read_corpus_file(path, ReadOptions(conversation_format=fmt)):
        if isinstance(outcome, Rejection):
            assert outcome.reason in known and outcome.detail
        elif outcome.is_conversation:
            roles = [role for role, _ in outcome.turns]
            assert set(roles) <= set(records.ROLES) and records.ASSISTANT in roles
            assert outcome.text == "\n\n".join(content for _, content in outcome.turns)
        else:
            assert fmt == "auto" and isinstance(outcome.text, str)
