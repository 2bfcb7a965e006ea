"""Reading one corpus file into documents and quarantined records, whatever its format.

Formats (by extension, optionally followed by `.gz` or `.bz2`):
    .txt            documents separated by blank lines (or one per line, or by a literal line)
    .jsonl          one JSON object per line; the document is the configured text field, or a
                    conversation in an instruction-data format (formats/conversations.py)
    .csv / .tsv     a header row; the document is the configured text column
    .tfrecord(s)    serialized tf.train.Example; the document is the configured bytes feature

Every reader streams through `tf.io.gfile`, so local paths and object-store URIs both work, and
memory stays bounded by `ReadOptions.max_record_bytes`. File-level problems every format shares
are handled here: an unsupported extension (error), a file yielding no records (quarantined as
empty), and a compressed stream that ends early or is corrupt (records before the damage kept,
the rest quarantined).
"""

import os
from typing import Callable, Dict, Iterator, Optional

from components.example_gen.byte_stream import DECOMPRESSION_ERRORS, split_extension
from components.example_gen.formats import delimited, jsonl, tfrecord, txt
from components.example_gen.formats.conversations import is_conversation_format
from components.example_gen.formats.lines import Outcome
from components.example_gen.options import ReadOptions
from components.example_gen.records import (  # noqa: F401  (re-exported for callers)
    EMPTY_FILE,
    TRUNCATED_COMPRESSED_FILE,
    CorpusError,
    Document,
    Rejection,
)

FORMAT_READERS: Dict[str, Callable[[str, str, ReadOptions], Iterator[Outcome]]] = {
    ".txt": txt.read_txt,
    ".jsonl": jsonl.read_jsonl,
    ".csv": delimited.read_csv,
    ".tsv": delimited.read_tsv,
    ".tfrecord": tfrecord.read_tfrecord,
    ".tfrecords": tfrecord.read_tfrecord,
}
SUPPORTED_EXTENSIONS = tuple(FORMAT_READERS)
CONVERSATION_EXTENSIONS = (".jsonl",)  # the formats that can hold a conversation per record


def read_corpus_file(
    path: str, options: Optional[ReadOptions] = None, source: Optional[str] = None
) -> Iterator[Outcome]:
    """Yields a Document or a Rejection for every record of `path`.

    Raises CorpusError for an unsupported file type, a file that cannot hold the forced
    conversation format, a CSV header lacking the text column, and invalid UTF-8 under the 'fail'
    policy.
    """
    options = options or ReadOptions()
    source = source or os.path.basename(path)
    extension, compression = split_extension(path)
    reader = FORMAT_READERS.get(extension)
    if reader is None:
        raise CorpusError(
            f"{path}: unsupported corpus file type '{extension}' "
            f"(supported: {', '.join(SUPPORTED_EXTENSIONS)}, each optionally .gz or .bz2)"
        )
    if is_conversation_format(options.conversation_format) and extension not in CONVERSATION_EXTENSIONS:
        raise CorpusError(
            f"{path}: example_gen.conversation_format={options.conversation_format} reads "
            f"{', '.join(CONVERSATION_EXTENSIONS)} files only, not '{extension}'"
        )
    produced, last_line = 0, 0
    try:
        for outcome in reader(path, source, options):
            produced, last_line = produced + 1, outcome.line
            yield outcome
    except DECOMPRESSION_ERRORS as exc:
        if not compression:
            raise
        produced += 1
        yield Rejection(
            TRUNCATED_COMPRESSED_FILE,
            source,
            last_line + 1,
            b"",
            0,
            f"{compression} stream is truncated or corrupt after the record at line {last_line} "
            f"({type(exc).__name__}: {exc}); earlier records were kept",
        )
    if not produced:
        yield Rejection(EMPTY_FILE, source, 0, b"", 0, "the file holds no records")


def read_txt_documents(path: str) -> Iterator[Document]:
    """The documents of a blank-line separated text file (default options); for tools and tests."""
    return (outcome for outcome in read_corpus_file(path) if isinstance(outcome, Document))
