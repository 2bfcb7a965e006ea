"""The special token ids a tokenizer defines, and how documents are framed with them.

Every consumer of token ids (training data, decoding, the export's scoring signatures, the
evaluator) asks the tokenizer for these instead of assuming fixed ids:

    bos_id, eos_id      beginning / end of sequence; decoding stops at eos_id
    pad_id              what fills ragged rows out to a rectangle (never scored where a mask exists)
    document_prefix     ids put before every document in training data, prompts and scoring
    document_suffix     ids put after every document (empty when the next document's prefix
                        already separates them)

The pipeline's learned SentencePiece model has one separator, [EOS], before every document
(`LEARNED`). A checkpoint's tokenizer follows its own convention (`for_checkpoint`): Llama puts
<s> before and </s> after a document; GPT-2's single <|endoftext|> is both bos and eos, so it
goes between documents (before each one) and not a second time after.
"""
from typing import NamedTuple, Optional, Tuple

from components.tokenizer import ids


class SpecialTokens(NamedTuple):
    """See the module docstring."""

    bos_id: int
    eos_id: int
    pad_id: int
    document_prefix: Tuple[int, ...]
    document_suffix: Tuple[int, ...]

    def to_json(self) -> dict:
        """A JSON-able dict (written next to a checkpoint tokenizer's files)."""
        return {"bos_id": self.bos_id, "eos_id": self.eos_id, "pad_id": self.pad_id,
                "document_prefix": list(self.document_prefix), "document_suffix": list(self.document_suffix)}

    @classmethod
    def from_json(cls, data: dict, source: str) -> "SpecialTokens":
        """The inverse of `to_json`; a missing or non-integer field is an error naming `source`."""
        try:
            return cls(int(data["bos_id"]), int(data["eos_id"]), int(data["pad_id"]),
                       tuple(int(i) for i in data["document_prefix"]), tuple(int(i) for i in data["document_suffix"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: bad special token record ({type(exc).__name__}: {exc})") from None


LEARNED = SpecialTokens(bos_id=ids.EOS_ID, eos_id=ids.EOS_ID, pad_id=ids.PAD_ID,
                        document_prefix=(ids.EOS_ID,), document_suffix=())


def for_checkpoint(bos_id: Optional[int], eos_id: Optional[int], pad_id: Optional[int], unk_id: Optional[int],
                   source: str) -> SpecialTokens:
    """A checkpoint's convention from the ids its config and tokenizer files name (see module
    docstring). Without a pad id, padding uses the unknown token when it is a separate token that
    byte-level tokenizers never produce (Llama's <unk>), else eos (GPT-2 has nothing else)."""
    if eos_id is None:
        raise ValueError(f"{source}: no end-of-sequence token (eos_token_id / eos_token): decoding could not stop")
    bos = eos_id if bos_id is None else bos_id
    if pad_id is None:
        pad_id = unk_id if unk_id is not None and unk_id not in (bos, eos_id) else eos_id
    suffix = () if bos == eos_id else (eos_id,)
    return SpecialTokens(bos, eos_id, pad_id, (bos,), suffix)
