"""The Tokenizer stage's product: the `Tokenizer` artifact type.

Its directory holds `sentencepiece.model` (learned, reused or pinned), or a Hugging Face
checkpoint's tokenizer files and `special_tokens.json` (policy checkpoint; see loaded.py, which
reads either), with custom properties (KFP carries custom properties only):

    vocab_size, algorithm, sha256      the model (for a checkpoint: algorithm is the kind, and
                                       file_sha256 holds each file's sha256 as JSON)
    vocab_size_choice                  auto (tokenizer.vocab_size unset: the largest vocabulary up to
                                       vocab_size_limit the sample supports) | explicit (a requirement)
    rare_characters_left_to_bytes      distinct characters of the sample learned from as bytes only (learn.py)
    number_splitting                   how the tokenizer splits the sample's numbers (numbers.py): digits,
                                       digits alone, merges_digits, fixed texts as tokens; JSON
    source                             learned | reused | pinned | checkpoint, and `source_detail` saying which
    learned_from_examples, learned_from_span, sample_chunks, sample_bytes   for a learned model
    tokenizers_agreement               a checkpoint's tokenizer.json: the graph's ids equal Hugging Face
                                       `tokenizers`' on the probe set (agreement.py; a difference stops
                                       the run), as JSON; `unused_files`: tokenizer files it ignored
"""

from tfx import types


class Tokenizer(types.Artifact):
    """A tokenizer (a SentencePiece model file or a checkpoint's tokenizer files) and what it was
    made from (see the module docstring)."""

    TYPE_NAME = "components.Tokenizer"  # importable schema title (see components/__init__.py)
