"""The special token ids a tokenizer defines, and how documents and prompts are framed with them.

Every consumer of token ids (training data, decoding, the export's scoring signatures, the
evaluator) asks the tokenizer for these instead of assuming fixed ids:

    bos_id, eos_id      beginning / end of sequence; decoding stops at eos_id
    pad_id              what fills ragged rows out to a rectangle (never scored where a mask exists)
    document_prefix     ids put before every document in training data and whole-document scoring
    document_suffix     ids put after every document (empty when the next document's prefix
                        already separates them)
    prompt_prefix       ids put before a prompt (`generate`) and a scored prefix
    prompt_suffix       (`score_continuation`): how the tokenizer itself frames one text
    unk_id              the unknown token, or None

Documents are framed as the tokenizer's model was pretrained: the pipeline's learned SentencePiece
model has one separator, [EOS], before every document (`LEARNED`); Llama puts <s> before and </s>
after a document; GPT-2's single <|endoftext|> is both bos and eos, so it goes between documents
(before each one) and not a second time after.

Prompts are framed as the checkpoint's tokenizer frames a text when transformers (and so vLLM or
TGI) encodes it (hf_files.py reads the rule): GPT-2 adds nothing, Llama adds <s>. A served model
then answers a prompt as those servers do with the same weights. The learned tokenizer frames a
prompt as a document start ([EOS] before it), as it always has.

`document_forbidden_ids` are the ids that never belong inside a document's own tokens: the ones
the pipeline places itself (bos, eos, pad, the framing ids) and the unknown token (never made
with byte fallback; without it, a character the tokenizer cannot represent). The TokenGate
refuses token data that contains one (transform/preprocessing.py counts them).
"""

from typing import FrozenSet, NamedTuple, Optional, Tuple

from components.tokenizer import ids


class SpecialTokens(NamedTuple):
    """See the module docstring."""

    bos_id: int
    eos_id: int
    pad_id: int
    document_prefix: Tuple[int, ...]
    document_suffix: Tuple[int, ...]
    prompt_prefix: Tuple[int, ...] = ()
    prompt_suffix: Tuple[int, ...] = ()
    unk_id: Optional[int] = None

    def to_json(self) -> dict:
        """A JSON-able dict (written next to a checkpoint tokenizer's files)."""
        return {
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "pad_id": self.pad_id,
            "document_prefix": list(self.document_prefix),
            "document_suffix": list(self.document_suffix),
            "prompt_prefix": list(self.prompt_prefix),
            "prompt_suffix": list(self.prompt_suffix),
            "unk_id": self.unk_id,
        }

    @classmethod
    def from_json(cls, data: dict, source: str) -> "SpecialTokens":
        """The inverse of `to_json`; a missing or non-integer field is an error naming `source`.
        A record written before prompts had their own framing (no `prompt_prefix`) frames prompts
        as documents, which is how the models exported with it were served and evaluated."""
        try:
            document_prefix = tuple(int(i) for i in data["document_prefix"])
            unk = data.get("unk_id")
            return cls(
                int(data["bos_id"]),
                int(data["eos_id"]),
                int(data["pad_id"]),
                document_prefix,
                tuple(int(i) for i in data["document_suffix"]),
                tuple(int(i) for i in data.get("prompt_prefix", document_prefix)),
                tuple(int(i) for i in data.get("prompt_suffix", ())),
                None if unk is None else int(unk),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: bad special token record ({type(exc).__name__}: {exc})") from None

    def document_forbidden_ids(self) -> FrozenSet[int]:
        """Ids that must never appear among a document's own tokens (see the module docstring)."""
        placed = {
            self.bos_id,
            self.eos_id,
            self.pad_id,
            *self.document_prefix,
            *self.document_suffix,
            *self.prompt_prefix,
            *self.prompt_suffix,
        }
        return frozenset(placed | ({self.unk_id} if self.unk_id is not None else set()))


LEARNED = SpecialTokens(
    bos_id=ids.EOS_ID,
    eos_id=ids.EOS_ID,
    pad_id=ids.PAD_ID,
    document_prefix=(ids.EOS_ID,),
    document_suffix=(),
    prompt_prefix=(ids.EOS_ID,),
    prompt_suffix=(),
    unk_id=ids.UNK_ID,
)


def for_checkpoint(
    bos_id: Optional[int],
    eos_id: Optional[int],
    pad_id: Optional[int],
    unk_id: Optional[int],
    source: str,
    prompt_prefix: Tuple[int, ...] = (),
    prompt_suffix: Tuple[int, ...] = (),
) -> SpecialTokens:
    """A checkpoint's convention from the ids its config and tokenizer files name (see module
    docstring); `prompt_prefix` / `prompt_suffix`: how its tokenizer frames one text. Without a
    pad id, padding uses the unknown token when it is a separate token that byte-level tokenizers
    never produce (Llama's <unk>), else eos (GPT-2 has nothing else)."""
    if eos_id is None:
        raise ValueError(f"{source}: no end-of-sequence token (eos_token_id / eos_token): decoding could not stop")
    bos = eos_id if bos_id is None else bos_id
    if pad_id is None:
        pad_id = unk_id if unk_id is not None and unk_id not in (bos, eos_id) else eos_id
    suffix = () if bos == eos_id else (eos_id,)
    return SpecialTokens(bos, eos_id, pad_id, (bos,), suffix, tuple(prompt_prefix), tuple(prompt_suffix), unk_id)
