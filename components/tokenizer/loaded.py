"""The one tokenizer interface Transform, the Trainer, the Evaluator and the export share.

A *tokenizer directory* holds one tokenizer's files; the same files travel unchanged through the
pipeline, so one sha256 names the tokenizer everywhere:

    <Tokenizer artifact>/                         what the Tokenizer stage wrote
    <transform graph>/transform_fn/assets/        what Transform tokenized with
    <exported SavedModel>/assets/                 what the served model tokenizes with

Kinds (`load` tells them apart by their files):

    learned_sentencepiece   sentencepiece.model, the pipeline's own layout (ids.py), graph.py
    sentencepiece           a checkpoint's tokenizer.model (no tokenizer.json), sentencepiece_graph.py
    sentencepiece_bpe       a checkpoint's SentencePiece-style tokenizer.json, sentencepiece_bpe_graph.py
    byte_level_bpe          a checkpoint's tokenizer.json or vocab.json + merges.txt, bpe_graph.py

`load` also accepts a Hugging Face checkpoint directory itself (hf_files.py reads its config for
the special ids). `LoadedTokenizer.graph()` builds the tf.Module with `tokenize` / `detokenize`, and
`LoadedTokenizer.special` gives the ids that frame documents and stop decoding.
"""

import json
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import tensorflow as tf

from components.tokenizer import hf_files, ids, model_file, special
from components.tokenizer.special import SpecialTokens

LEARNED_SENTENCEPIECE = "learned_sentencepiece"
SENTENCEPIECE, BYTE_LEVEL_BPE, SENTENCEPIECE_BPE = (
    hf_files.SENTENCEPIECE,
    hf_files.BYTE_LEVEL_BPE,
    hf_files.SENTENCEPIECE_BPE,
)


class LoadedTokenizer(NamedTuple):
    """One tokenizer, as `load` reads it from a directory: its kind, files (name -> bytes), hash,
    size and special ids. (The TFX artifact that holds one is `artifact.Tokenizer`.)"""

    kind: str
    files: Dict[str, bytes]
    sha256: str
    vocab_size: int
    special: SpecialTokens
    source: str  # the directory it was loaded from, for messages
    unused_files: Tuple[str, ...] = ()  # tokenizer files beside it that are not used (hf_files.py)

    def graph(self, name: Optional[str] = None) -> tf.Module:
        """A tf.Module with `tokenize([batch] strings) -> ragged int64` and `detokenize(ids) -> strings`
        (`name`: its name scope; default: the kind's own)."""
        names = {} if name is None else {"name": name}
        if self.kind == LEARNED_SENTENCEPIECE:
            from components.tokenizer.graph import GraphTokenizer

            return GraphTokenizer(self.files[model_file.MODEL_FILE_NAME], **names)
        if self.kind == SENTENCEPIECE:
            from components.tokenizer.sentencepiece_graph import CheckpointSentencePieceGraph

            return CheckpointSentencePieceGraph(self.files[hf_files.SENTENCEPIECE_FILE], **names)
        vocabulary = self._vocabulary()
        if self.kind == SENTENCEPIECE_BPE:
            from components.tokenizer.sentencepiece_bpe_graph import SentencePieceBpeGraph

            return SentencePieceBpeGraph(
                vocabulary.vocab,
                vocabulary.merges,
                vocabulary.special_ids.values(),
                vocabulary.text_steps,
                source=self.source,
                **names,
            )
        from components.tokenizer.bpe_graph import ByteLevelBpeGraph

        return ByteLevelBpeGraph(
            vocabulary.vocab,
            vocabulary.merges,
            vocabulary.special_ids.values(),
            source=self.source,
            digits=vocabulary.digits,
            expression=vocabulary.expression,
            ignore_merges=vocabulary.ignore_merges,
            **names,
        )

    def byte_token_ids(self) -> List[int]:
        """The ids of the tokens that stand for one byte (byte-fallback pieces, byte-level symbols)."""
        if self.kind == LEARNED_SENTENCEPIECE:
            return list(range(ids.FIRST_BYTE_ID, ids.FIRST_LEARNED_ID))
        if self.kind == SENTENCEPIECE:
            import sentencepiece as spm

            processor = spm.SentencePieceProcessor(model_proto=self.files[hf_files.SENTENCEPIECE_FILE])
            return [i for i in range(processor.get_piece_size()) if processor.is_byte(i)]
        if self.kind == SENTENCEPIECE_BPE:
            from components.tokenizer.sentencepiece_bpe_graph import byte_token

            vocab = self._vocabulary().vocab
            return sorted(vocab[byte_token(value)] for value in range(256))
        from components.tokenizer import byte_level

        vocab = self._vocabulary().vocab
        return sorted(vocab[char] for char in byte_level.byte_to_char())

    def document_forbidden_ids(self) -> List[int]:
        """The ids a document's own tokens must never contain (special.py), sorted."""
        return sorted(self.special.document_forbidden_ids())

    def _vocabulary(self) -> hf_files.Vocabulary:
        return hf_files.token_ids(self.kind, self.files, self.source)

    def write(self, directory: str) -> None:
        """Writes the files (and, for a checkpoint's tokenizer, the special-id record) to `directory`."""
        tf.io.gfile.makedirs(directory)
        files = dict(self.files)
        if self.kind != LEARNED_SENTENCEPIECE:
            files[hf_files.SPECIAL_RECORD] = json.dumps(self.special.to_json(), indent=2).encode()
        for name, data in files.items():
            with tf.io.gfile.GFile(os.path.join(directory, name), "wb") as handle:
                handle.write(data)

    def chat(self):
        """The chat template and grammar this tokenizer carries (`chat_template.ChatSpec`), or None."""
        from components.tokenizer.chat_template import ChatSpec

        return ChatSpec.from_files(self.files, self.source)

    def file_paths(self, directory: str) -> List[str]:
        """The paths `write(directory)` writes (what an export carries as assets)."""
        names = list(self.files) + ([] if self.kind == LEARNED_SENTENCEPIECE else [hf_files.SPECIAL_RECORD])
        return [os.path.join(directory, name) for name in names]


def load(directory: str) -> LoadedTokenizer:
    """The tokenizer in `directory` (see module docstring), or the learned SentencePiece model file
    `directory` names; errors name the directory or file."""
    learned_path = os.path.join(directory, model_file.MODEL_FILE_NAME)
    if tf.io.gfile.exists(directory) and not tf.io.gfile.isdir(directory):
        learned_path = directory
    if tf.io.gfile.exists(learned_path):
        described = model_file.read_model(learned_path)
        files = {model_file.MODEL_FILE_NAME: described.proto, **_chat_files(os.path.dirname(learned_path))}
        return LoadedTokenizer(
            LEARNED_SENTENCEPIECE, files, described.sha256, described.vocab_size, special.LEARNED, directory
        )
    found = hf_files.read(directory)
    vocabulary = hf_files.token_ids(found.kind, found.files, directory)
    return LoadedTokenizer(
        found.kind,
        {**found.files, **_chat_files(directory)},
        hf_files.combined_sha256(found.files),
        vocabulary.size,
        found.special,
        directory,
        found.unused_files,
    )


def _chat_files(directory: str) -> Dict[str, bytes]:
    """The chat record the Tokenizer stage wrote beside the tokenizer's files (chat_template.py:
    the template and its grammar), when it wrote one: only for conversation data, and never read
    from a checkpoint's own directory (whose template the stage turns into this record)."""
    from components.tokenizer import chat_template

    path = os.path.join(directory, chat_template.GRAMMAR_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    files = {}
    for name in (chat_template.GRAMMAR_FILE, chat_template.TEMPLATE_FILE):
        with tf.io.gfile.GFile(os.path.join(directory, name), "rb") as handle:
            files[name] = handle.read()
    return files


def transform_graph_dir(transform_graph_uri: str) -> str:
    """The tokenizer directory inside a transform graph."""
    return os.path.dirname(model_file.transform_graph_model_path(transform_graph_uri))


def saved_model_dir(saved_model_dir_path: str) -> str:
    """The tokenizer directory among an exported SavedModel's assets."""
    return os.path.dirname(model_file.saved_model_model_path(saved_model_dir_path))
