"""Writes a tiny GPT-2-shaped Hugging Face checkpoint to fine-tune offline (docs/fine-tuning.md).

    python data/make_tiny_checkpoint.py checkpoints/tiny-gpt2

The directory gets what a checkpoint downloaded from the Hugging Face Hub has, in the same
layout and formats, so `textgen run --set model.checkpoint=DIR` goes through the same import,
tokenizer and export code as it does for `gpt2`:

    config.json             model_type gpt2: 2 layers, 4 heads, width 64, 128 positions, 512 tokens
    generation_config.json
    model.safetensors       GPT2LMHeadModel's tensor names (`transformer.h.0.attn.c_attn.weight`, ...),
                            Conv1D [in, out] layout, float32, head tied to the token embedding
    tokenizer.json, vocab.json, merges.txt, tokenizer_config.json
                            byte-level BPE (GPT-2's pre-tokenizer and regex), learned with `tokenizers`
                            from the bundled corpus; <|endoftext|> is token 0

The weights are random (GPT-2's initialisation: normal with standard deviation 0.02, norms at 1,
biases at 0, from a fixed seed), so the model knows nothing yet: it exists to show what a
fine-tuning run does in a couple of minutes on a CPU, not to be good. Nothing is downloaded; it
needs numpy, safetensors and tokenizers, which the project's environment has.
"""

import argparse
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus", "support_replies.txt")
END_OF_TEXT = "<|endoftext|>"
SHAPE = {"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 128, "vocab_size": 512}
INIT_STD = 0.02  # GPT-2's initializer_range


def config() -> dict:
    """config.json as transformers writes it for a GPT2LMHeadModel of SHAPE."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        **SHAPE,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "initializer_range": INIT_STD,
        "attn_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "resid_pdrop": 0.0,
        "scale_attn_weights": True,
        "tie_word_embeddings": True,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "torch_dtype": "float32",
    }


def weights(seed: int) -> dict:
    """GPT2LMHeadModel's tensors (without `lm_head.weight`: the head is tied to `wte`)."""
    rng = np.random.default_rng(seed)
    width, layers = SHAPE["n_embd"], SHAPE["n_layer"]

    def normal(*shape):
        return rng.normal(0.0, INIT_STD, shape).astype(np.float32)

    tensors = {
        "transformer.wte.weight": normal(SHAPE["vocab_size"], width),
        "transformer.wpe.weight": normal(SHAPE["n_positions"], width),
        "transformer.ln_f.weight": np.ones(width, np.float32),
        "transformer.ln_f.bias": np.zeros(width, np.float32),
    }
    for layer in range(layers):
        block = f"transformer.h.{layer}."
        tensors.update(
            {
                block + "ln_1.weight": np.ones(width, np.float32),
                block + "ln_1.bias": np.zeros(width, np.float32),
                block + "attn.c_attn.weight": normal(width, 3 * width),
                block + "attn.c_attn.bias": np.zeros(3 * width, np.float32),
                block + "attn.c_proj.weight": normal(width, width),
                block + "attn.c_proj.bias": np.zeros(width, np.float32),
                block + "ln_2.weight": np.ones(width, np.float32),
                block + "ln_2.bias": np.zeros(width, np.float32),
                block + "mlp.c_fc.weight": normal(width, 4 * width),
                block + "mlp.c_fc.bias": np.zeros(4 * width, np.float32),
                block + "mlp.c_proj.weight": normal(4 * width, width),
                block + "mlp.c_proj.bias": np.zeros(width, np.float32),
            }
        )
    return tensors


def learn_byte_level_bpe(lines, vocab_size: int, end_of_text_last: bool = False, added_special_tokens: tuple = ()):
    """A byte-level BPE built as GPT-2's tokenizer is (its pre-tokenizer, regex and decoder), learned
    with `tokenizers` from `lines`: at most `vocab_size` entries with <|endoftext|>, then
    `added_special_tokens` after them as special tokens (as transformers' add_special_tokens adds a
    chat template's).

    The id layout: by default <|endoftext|> is id 0 and the 256 byte symbols follow; with
    `end_of_text_last`, GPT-2's own layout: the byte symbols take ids 0-255 in code point order
    ('!' '"' '#' are 0, 1, 2), then the merges, and <|endoftext|> is the last id, listed in the
    model's vocabulary too (GPT-2's vocab.json lists it)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    # A special token given to the trainer takes the first ids; one added after learning, the last.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - 1 if end_of_text_last else vocab_size,
        special_tokens=[] if end_of_text_last else [END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(lines, trainer=trainer)
    if end_of_text_last:
        end_of_text = tokenizer.get_vocab_size()
        tokenizer.add_special_tokens([AddedToken(END_OF_TEXT, special=True, normalized=False)])
        spec = json.loads(tokenizer.to_str())
        spec["model"]["vocab"][END_OF_TEXT] = end_of_text
        tokenizer = Tokenizer.from_str(json.dumps(spec))
    tokenizer.add_special_tokens(list(added_special_tokens))
    return tokenizer


def write_gpt2_tokenizer_files(tokenizer, directory: str, model_max_length: int) -> int:
    """Writes `tokenizer` (from `learn_byte_level_bpe`) as a GPT-2 checkpoint ships it: tokenizer.json,
    vocab.json + merges.txt, tokenizer_config.json (<|endoftext|> as BOS, EOS and UNK). Returns the
    tokenizer's size."""
    os.makedirs(directory, exist_ok=True)
    spec = json.loads(tokenizer.to_str())
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as handle:
        json.dump(spec, handle, ensure_ascii=False, indent=2)
    tokenizer.model.save(directory)  # vocab.json + merges.txt
    _write_json(
        os.path.join(directory, "tokenizer_config.json"),
        {
            "bos_token": END_OF_TEXT,
            "eos_token": END_OF_TEXT,
            "unk_token": END_OF_TEXT,
            "model_max_length": model_max_length,
            "tokenizer_class": "GPT2Tokenizer",
        },
    )
    return tokenizer.get_vocab_size()


def write_tokenizer(
    directory: str,
    vocab_size: int = SHAPE["vocab_size"],
    model_max_length: int = SHAPE["n_positions"],
    added_special_tokens: tuple = (),
) -> int:
    """The tiny checkpoint's tokenizer (`learn_byte_level_bpe`, <|endoftext|> = 0) learned from the
    bundled support replies and written into `directory`. Returns the tokenizer's size."""
    with open(CORPUS, encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle if line.strip()]
    tokenizer = learn_byte_level_bpe(lines, vocab_size, added_special_tokens=added_special_tokens)
    return write_gpt2_tokenizer_files(tokenizer, directory, model_max_length)


def _write_json(path: str, value: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2)
        handle.write("\n")


def make_checkpoint(directory: str, seed: int = 0) -> None:
    """Writes the checkpoint into `directory` (created; files there of the same names are replaced)."""
    os.makedirs(directory, exist_ok=True)
    _write_json(os.path.join(directory, "config.json"), config())
    _write_json(os.path.join(directory, "generation_config.json"), {"bos_token_id": 0, "eos_token_id": 0})
    save_file(weights(seed), os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    write_tokenizer(directory)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="where to write the checkpoint, e.g. checkpoints/tiny-gpt2")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: 0)")
    args = parser.parse_args(argv)
    make_checkpoint(args.directory, args.seed)
    print(f"wrote a tiny GPT-2 checkpoint to {args.directory}: " + ", ".join(sorted(os.listdir(args.directory))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
