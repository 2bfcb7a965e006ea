"""Tiny Hugging Face checkpoints with their tokenizers, for tests that run the whole pipeline or
export a model back to the Hugging Face layout.

tests/fixtures/hf/<family>/ holds each model's weights and config (made by
tests/fixtures/make_hf_checkpoints.py, with transformers' outputs for the equivalence tests), and
tests/fixtures/hf/tokenizers/<kind>/ the tokenizer files (tests/fixtures/make_hf_tokenizers.py),
both with 512-entry vocabularies. A checkpoint as a user downloads it has both in one directory,
with config.json's (and generation_config.json's) special ids those of its tokenizer:
`checkpoint_with_tokenizer` assembles that. `expected_text.json` beside each model fixture holds
transformers' greedy generations from text prompts on the assembled checkpoint.
"""

import json
import os
import shutil

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf")
# family -> (tokenizer kind, config.json special ids matching that tokenizer)
PAIRS = {
    "gpt2": ("gpt2_bpe", {"bos_token_id": 511, "eos_token_id": 511}),  # <|endoftext|>, the last id as in GPT-2
    "llama": ("llama_sp", {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}),  # <s>, </s>, <unk>
}


def checkpoint_with_tokenizer(family: str, directory: str, tokenizer: str = "") -> str:
    """Copies fixture `family`'s weights, config and tokenizer files (those of `tokenizer`, another
    kind of the same size and special ids, when given) into `directory`; returns it."""
    kind, special_ids = PAIRS[family]
    kind = tokenizer or kind
    shutil.copytree(os.path.join(FIXTURES, family), directory, ignore=shutil.ignore_patterns("expected*"))
    for name in os.listdir(os.path.join(FIXTURES, "tokenizers", kind)):
        shutil.copy(os.path.join(FIXTURES, "tokenizers", kind, name), directory)
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(directory, name)
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
        config.update(special_ids)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(config, handle, indent=2)
    return directory


def expected_text(family: str) -> dict:
    """transformers' greedy generations from text prompts on the assembled `family` checkpoint
    (tests/fixtures/make_hf_checkpoints.py writes them)."""
    with open(os.path.join(FIXTURES, family, "expected_text.json"), encoding="utf-8") as handle:
        return json.load(handle)
