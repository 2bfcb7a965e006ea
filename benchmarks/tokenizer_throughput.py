"""Tokenizer benchmark: our exported transform graph vs reference tokenizers, in one run.

For each tokenizer, learned from the same documents with the same vocabulary size, it measures
learning time, tokenization throughput (MB/s of raw UTF-8 and tokens/s, batches of documents,
after one warm-up pass) and compression (bytes per token), and checks the round trip.

It also measures the share of compute lost to padding with our packing (documents concatenated
with separators, cut into blocks of context + 1) against the common baseline of one document per
sequence, truncated or padded to the context length.

    ours          TF Transform analyze (Beam DirectRunner) + the saved transform graph
    hf-bytelevel  Hugging Face `tokenizers` byte-level BPE (Rust)
    sentencepiece SentencePiece BPE with byte fallback (C++)

Usage:
    python benchmarks/tokenizer_throughput.py [--corpus PATH] [--vocab-size 4096] [--batch-size 256]

Prints a table and writes benchmarks/results/tokenizer_throughput.json.
"""
import argparse
import json
import os
import platform
import sys
import tempfile
import time
from typing import Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DEFAULT_CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "tinyshakespeare.txt")
RESULTS = os.path.join(os.path.dirname(__file__), "results", "tokenizer_throughput.json")


def load_documents(path: str) -> List[str]:
    from components.example_gen.readers import read_txt_documents

    return [document.text for document in read_txt_documents(path)]


def batches(items: List[str], size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def measure(encode: Callable[[List[str]], List[List[int]]], documents: List[str], batch_size: int) -> Dict[str, float]:
    """Throughput of `encode` over all documents (after a warm-up pass) and its token count."""
    for batch in batches(documents, batch_size):  # warm-up: tracing, caches
        encode(batch)
    start = time.perf_counter()
    num_tokens = sum(sum(len(ids) for ids in encode(batch)) for batch in batches(documents, batch_size))
    seconds = time.perf_counter() - start
    num_bytes = sum(len(d.encode("utf-8")) for d in documents)
    return {
        "seconds": seconds,
        "mb_per_s": num_bytes / seconds / 1e6,
        "tokens_per_s": num_tokens / seconds,
        "bytes_per_token": num_bytes / num_tokens,
        "num_tokens": num_tokens,
    }


def packing_waste(lengths: List[int], context_length: int) -> Dict[str, float]:
    """Padding/truncation shares of packed blocks vs one padded document per sequence."""
    stream = sum(length + 1 for length in lengths)  # + one separator per document
    block = context_length + 1
    padded_positions = len(lengths) * context_length
    used = sum(min(length + 1, context_length) for length in lengths)
    return {
        "packed_waste": (stream % block) / stream,
        "padded_waste": 1 - used / padded_positions,
        "truncated": sum(max(length + 1 - context_length, 0) for length in lengths) / stream,
    }


def ours(documents: List[str], vocab_size: int, workdir: str):
    import tensorflow as tf
    import tensorflow_transform as tft

    from components.transform import tokenizer
    from components.transform.standalone import analyze_and_transform

    start = time.perf_counter()
    output = tft.TFTransformOutput(analyze_and_transform(documents, vocab_size, os.path.join(workdir, "ours")))
    learn_seconds = time.perf_counter() - start
    layer = output.transform_features_layer()
    id_to_piece = tokenizer.id_to_piece_table(output.vocabulary_file_by_name(tokenizer.VOCABULARY_ASSET_NAME))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def encode_graph(texts):
        return layer({"text": tf.reshape(texts, [-1, 1])})["token_ids"]

    def encode(texts):
        return encode_graph(tf.constant(texts)).to_list()

    def decode(ids):
        return [t.decode("utf-8") for t in tokenizer.detokenize(tf.ragged.constant(ids, dtype=tf.int64), id_to_piece).numpy()]

    return learn_seconds, encode, decode


def hf_bytelevel(documents: List[str], vocab_size: int, workdir: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    start = time.perf_counter()
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    hf.train_from_iterator(documents, trainer=trainer)
    learn_seconds = time.perf_counter() - start

    def encode(texts):
        return [encoding.ids for encoding in hf.encode_batch(texts)]

    def decode(ids):
        return hf.decode_batch(ids)

    return learn_seconds, encode, decode


def sentencepiece_bpe(documents: List[str], vocab_size: int, workdir: str):
    import sentencepiece as spm

    corpus = os.path.join(workdir, "sp_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as handle:
        for document in documents:
            handle.write(document.replace("\n", " ") + "\n")
    start = time.perf_counter()
    prefix = os.path.join(workdir, "sp")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, num_threads=1, minloglevel=2, remove_extra_whitespaces=False,
        normalization_rule_name="identity", split_digits=False,
    )
    learn_seconds = time.perf_counter() - start
    processor = spm.SentencePieceProcessor(model_file=prefix + ".model")

    def encode(texts):
        return processor.encode(texts)

    def decode(ids):
        return processor.decode(ids)

    return learn_seconds, encode, decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=DEFAULT_CORPUS, help="A .txt corpus (blank-line separated documents).")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--context-length", type=int, default=128, help="Block length for the packing comparison.")
    args = parser.parse_args()
    if not os.path.exists(args.corpus):
        sys.exit(f"corpus not found: {args.corpus} (the shared benchmark corpus lives outside the repository)")
    documents = load_documents(args.corpus)
    print(f"{len(documents)} documents, {sum(len(d.encode('utf-8')) for d in documents) / 1e6:.2f} MB, "
          f"vocabulary {args.vocab_size}, batch {args.batch_size}")
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for name, build in (("ours", ours), ("hf-bytelevel", hf_bytelevel), ("sentencepiece", sentencepiece_bpe)):
            learn_seconds, encode, decode = build(documents, args.vocab_size, workdir)
            result = measure(encode, documents, args.batch_size)
            sample = documents[:200]
            result.update(name=name, learn_seconds=learn_seconds, round_trip=decode(encode(sample)) == sample)
            rows.append(result)
            if name == "ours":
                lengths = [len(ids) for batch in batches(documents, args.batch_size) for ids in encode(batch)]
                packing = packing_waste(lengths, args.context_length)
            print(f"  measured {name}", flush=True)
    header = f"{'tokenizer':<14} {'learn s':>8} {'MB/s':>7} {'tokens/s':>10} {'bytes/token':>12} {'round trip':>10}"
    print(header)
    for row in rows:
        print(f"{row['name']:<14} {row['learn_seconds']:>8.1f} {row['mb_per_s']:>7.2f} {row['tokens_per_s']:>10.0f} "
              f"{row['bytes_per_token']:>12.3f} {str(row['round_trip']):>10}")
    print(f"\npacking at context {args.context_length}: packed blocks waste {packing['packed_waste']:.4%} "
          f"(tail tokens dropped); one padded document per sequence wastes {packing['padded_waste']:.2%} "
          f"of positions on padding and truncates {packing['truncated']:.2%} of tokens")
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    machine = {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()}
    with open(RESULTS, "w", encoding="utf-8") as handle:
        json.dump({"corpus": os.path.abspath(args.corpus), "vocab_size": args.vocab_size, "batch_size": args.batch_size,
                   "machine": machine, "results": rows, "packing": packing}, handle, indent=2)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
