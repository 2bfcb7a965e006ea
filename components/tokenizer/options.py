"""Typed options of the Tokenizer stage (composed into the pipeline config as `tokenizer`)."""

from typing import Literal, Optional

from pydantic import Field, model_validator

from components.options import Options
from components.tokenizer.ids import MIN_VOCAB_SIZE

Policy = Literal["auto", "learn", "reuse", "pinned", "checkpoint"]
Algorithm = Literal["bpe", "unigram"]
AUTO_MAX_VOCAB_SIZE = 4096  # the most pieces an automatic vocabulary (vocab_size unset) learns
# ... and at most one piece per this many bytes of sample text, so that a model sees each piece
# often enough to learn it (about 30-40 times in English). 400 speeches of Shakespeare (57 KB)
# with 4,096 pieces saw most pieces 3 or 4 times: the model memorised them and never beat a
# unigram model on the eval split; with 512 it did by far.
AUTO_BYTES_PER_PIECE = 128


def automatic_vocab_limit(sample_bytes: int) -> int:
    """The most pieces an automatic vocabulary learns from a sample of `sample_bytes` bytes:
    AUTO_MAX_VOCAB_SIZE, or for a small sample one piece per AUTO_BYTES_PER_PIECE bytes (a multiple
    of 64, never below MIN_VOCAB_SIZE)."""
    by_size = sample_bytes // AUTO_BYTES_PER_PIECE // 64 * 64
    return max(MIN_VOCAB_SIZE, min(AUTO_MAX_VOCAB_SIZE, by_size))


class TokenizerOptions(Options):
    """Which SentencePiece model a run tokenizes with, and how a new one is learned."""

    policy: Policy = Field(
        "auto",
        description="learn: a new model from this span's train split; reuse: the model of the registry's production "
        "model (fails when there is none); pinned: pinned_model_file; auto: reuse when a production model "
        "exists, else learn; checkpoint: the tokenizer files of model.checkpoint (auto chooses it "
        "when model.checkpoint is set).",
    )
    pinned_model_file: str = Field("", description="SentencePiece .model file used when policy=pinned.")
    vocab_size: Optional[int] = Field(
        None,
        ge=MIN_VOCAB_SIZE,
        le=1_000_000,
        description=f"Pieces in a learned model, including 3 special and 256 byte pieces. Default (null): automatic, the "
        f"largest vocabulary up to {AUTO_MAX_VOCAB_SIZE} (and up to one piece per {AUTO_BYTES_PER_PIECE} "
        f"bytes of sample text) that the sample supports (logged, and recorded on "
        f"the Tokenizer artifact); a number set here is a requirement, and learning fails when the sample "
        f"supports fewer pieces.",
    )
    algorithm: Algorithm = Field("bpe", description="SentencePiece model type of a learned model.")
    sample_size: int = Field(
        20_000,
        ge=1,
        description="Text chunks of the train split a model is learned from "
        "(a hash sample drawn with Beam: learning cost is bounded by it).",
    )
    chunk_chars: int = Field(
        2048, ge=64, description="Documents are cut into chunks of at most this many characters before sampling."
    )
    pieces_cross_words: bool = Field(
        True,
        description="Let learned pieces span spaces (SentencePiece split_by_whitespace=false): shorter "
        "sequences, and a small corpus can fill the vocabulary.",
    )
    split_digits: bool = Field(
        True,
        description="Make every digit a piece of its own in a learned model (SentencePiece split_digits), so no "
        "piece joins a digit with another digit, a space or punctuation: models copy order numbers, amounts and "
        "dates digit by digit instead of memorising number pieces (docs/tokenizers.md, Numbers). false: the "
        "behaviour before this option (digits merge like any other characters).",
    )

    @model_validator(mode="after")
    def _pinned_needs_a_file(self) -> "TokenizerOptions":
        if self.policy == "pinned" and not self.pinned_model_file:
            raise ValueError("policy 'pinned' needs pinned_model_file")
        if self.pinned_model_file and self.policy != "pinned":
            raise ValueError(f"pinned_model_file is set but policy is '{self.policy}' (set policy: pinned)")
        return self
