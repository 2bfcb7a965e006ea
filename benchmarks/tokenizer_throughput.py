"""Tokenizer benchmark: ours (the Tokenizer stage's SentencePiece model, run by the exported
transform graph) vs native SentencePiece vs Hugging Face `tokenizers`, in one run.

Corpora: tinyshakespeare (English, from ../shared/data, not part of the repository) and a
synthetic Chinese corpus (`zh_corpus.py`). Per corpus and tokenizer, learned from the same
documents with the same vocabulary size: learning time, encoding throughput (MB/s of raw UTF-8
and tokens/s, batches of documents, after one warm-up pass, one thread), bytes per token, and
the round trip. Then learning time on a corpus replicated to about 100 MB, where our learner reads
everything with Beam but learns from a bounded sample.

    ours              Beam hash sample + SentencePiece BPE (components/tokenizer, the pipeline's
                      settings: byte fallback, no normalisation, pieces may span spaces), encoded by
                      the TF Transform graph (TF Text SentencePiece ops)
    ours: op only     the same model, only the tokenizer's graph ops (no transform layer)
    sp (our model)    the same model encoded by the sentencepiece library (what the graph costs)
    ours: words       ours with tokenizer.pieces_cross_words=false (pieces end at spaces, like
                      native SentencePiece), through the transform graph
    sentencepiece     native SentencePiece BPE as a user would learn it on the text (byte fallback,
                      identity normalisation, whitespace-split pieces), encoded with one thread
    hf-bytelevel      Hugging Face `tokenizers` byte-level BPE (Rust)
    ours: BPE graph   hf-bytelevel's vocabulary and merges run by our byte-level BPE graph
                      (components/tokenizer/bpe_graph.py: what a GPT-2-style checkpoint's tokenizer
                      costs in the transform and serving graphs); `ids_equal_hf` says whether its
                      ids on the first 200 documents equal hf-bytelevel's

The machine is shared: the load average is recorded before and after; a measurement with a load
above 1.5 on these 2-core machines is marked "loaded" and is not a result.

Usage:
    python benchmarks/tokenizer_throughput.py [--corpus PATH] [--vocab-size 4096] [--batch-size 256]
        [--large-mb 100] [--sample-size 20000]

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
os.environ.setdefault("RAYON_NUM_THREADS", "1")  # HF tokenizers on one thread, like the others

DEFAULT_CORPUS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "tinyshakespeare.txt")
RESULTS = os.path.join(os.path.dirname(__file__), "results", "tokenizer_throughput.json")
MAX_VALID_LOAD = 1.5  # above this on 2 cores a number is not a result (benchmarks/machine.py, README.md)


def load_documents(path: str) -> List[str]:
    from components.example_gen.readers import read_txt_documents

    return [document.text for document in read_txt_documents(path)]


def batches(items: List[str], size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def measure(count: Callable[[List[str]], int], documents: List[str], batch_size: int) -> Dict[str, float]:
    """Throughput of `count` (tokenizes a batch, returns its token count, in the tokenizer's own
    output form) over all documents, after a warm-up pass."""
    for batch in batches(documents, batch_size):  # warm-up: tracing, caches
        count(batch)
    start = time.perf_counter()
    num_tokens = sum(count(batch) for batch in batches(documents, batch_size))
    seconds = time.perf_counter() - start
    num_bytes = sum(len(d.encode("utf-8")) for d in documents)
    return {
        "seconds": seconds,
        "mb_per_s": num_bytes / seconds / 1e6,
        "tokens_per_s": num_tokens / seconds,
        "bytes_per_token": num_bytes / num_tokens,
        "num_tokens": num_tokens,
    }


def list_count(encode: Callable[[List[str]], List[List[int]]]) -> Callable[[List[str]], int]:
    """Token count of a tokenizer whose natural output is Python lists."""
    return lambda texts: sum(len(ids) for ids in encode(texts))


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


def write_examples(documents: List[str], path: str) -> str:
    """The documents as GZIP tf.Examples with a `text` feature, as ExampleGen writes them."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for text in documents:
            feature = {"text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode("utf-8")]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return path


def learn_ours(
    examples_file: str, vocab_size: int, sample_size: int, workdir: str, pieces_cross_words: bool = True
) -> Dict[str, object]:
    """The Tokenizer stage's learning: Beam hash sample of the examples, then SentencePiece."""
    import apache_beam as beam

    from components.tokenizer import learn, sample
    from components.tokenizer.options import TokenizerOptions

    options = TokenizerOptions(vocab_size=vocab_size, sample_size=sample_size, pieces_cross_words=pieces_cross_words)
    start = time.perf_counter()
    pipeline = beam.Pipeline(
        options=beam.options.pipeline_options.PipelineOptions(
            ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
        )
    )
    drawn = sample.draw_sample(
        pipeline,
        [examples_file],
        "text",
        options.sample_size,
        options.chunk_chars,
        os.path.join(workdir, "sample.tfrecord.gz"),
    )
    sampled = time.perf_counter()
    rules = learn.PieceRules(options.pieces_cross_words, options.split_digits)
    proto = learn.learn_model(drawn.chunks, vocab_size, options.algorithm, rules)
    return {
        "proto": proto,
        "sample_seconds": sampled - start,
        "learn_seconds": time.perf_counter() - sampled,
        "sample_chunks": len(drawn.chunks),
        "sample_mb": drawn.num_bytes / 1e6,
    }


def ours(documents: List[str], vocab_size: int, workdir: str, sample_size: int, pieces_cross_words: bool = True):
    import tensorflow as tf
    import tensorflow_transform as tft

    from components.tokenizer import model_file
    from components.tokenizer.graph import GraphTokenizer
    from components.transform.standalone import analyze_and_transform

    learned = learn_ours(
        write_examples(documents, os.path.join(workdir, "examples.gz")),
        vocab_size,
        sample_size,
        workdir,
        pieces_cross_words,
    )
    model_path = os.path.join(workdir, "ours.model")
    model_file.copy_model(learned["proto"], model_path)
    graph_dir = analyze_and_transform(documents[:8], model_path, os.path.join(workdir, "ours-graph"))
    layer = tft.TFTransformOutput(graph_dir).transform_features_layer()
    detokenizer = GraphTokenizer(learned["proto"])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def encode_graph(texts):
        return layer({"text": tf.reshape(texts, [-1, 1])})["token_ids"]

    def encode(texts):
        return encode_graph(tf.constant(texts)).to_list()

    def count(texts):  # the graph's own output: a ragged tensor, not Python lists
        return int(tf.shape(encode_graph(tf.constant(texts)).flat_values)[0])

    def decode(ids):
        return [t.decode("utf-8") for t in detokenizer.detokenize(tf.ragged.constant(ids, dtype=tf.int64)).numpy()]

    return learned["sample_seconds"] + learned["learn_seconds"], encode, decode, count, learned["proto"]


def graph_op(tokenizer):
    """A tokenizer's graph ops alone (its `tokenize` in a tf.function), without the transform
    layer around them: what the rest of the transform graph costs."""
    import tensorflow as tf

    tokenize = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])

    def encode(texts):
        return tokenize(tf.constant(texts)).to_list()

    def decode(ids):
        return [t.decode("utf-8") for t in tokenizer.detokenize(tf.ragged.constant(ids, dtype=tf.int64)).numpy()]

    def count(texts):
        return int(tf.shape(tokenize(tf.constant(texts)).flat_values)[0])

    return encode, decode, count


def bpe_graph_of(hf, workdir: str):
    """Our byte-level BPE graph with the vocabulary and merges of the `tokenizers` model `hf` (read
    from its tokenizer.json; it has no special tokens, so not through `loaded.load`, which needs an
    eos token)."""
    from components.tokenizer import hf_files
    from components.tokenizer.bpe_graph import ByteLevelBpeGraph

    files = {hf_files.TOKENIZER_JSON: hf.to_str().encode("utf-8")}
    vocabulary = hf_files.token_ids(hf_files.BYTE_LEVEL_BPE, files, workdir)
    return graph_op(ByteLevelBpeGraph(vocabulary.vocab, vocabulary.merges, vocabulary.special_ids.values()))


def sentencepiece_of(proto: bytes):
    """Native encoding (one thread) with a given model."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=proto)
    return (lambda texts: processor.encode(texts, num_threads=1)), processor.decode


def hf_bytelevel(documents: List[str], vocab_size: int, workdir: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    start = time.perf_counter()
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    hf.train_from_iterator(documents, trainer=trainer)
    learn_seconds = time.perf_counter() - start

    def encode(texts):
        return [encoding.ids for encoding in hf.encode_batch(texts)]

    def decode(ids):
        return hf.decode_batch(ids)

    encode.tokenizer = hf  # for bpe_graph_of
    return learn_seconds, encode, decode


def sentencepiece_bpe(documents: List[str], vocab_size: int, workdir: str, sample_size: int = 0):
    """Native SentencePiece learned on the text file (one document per line); with `sample_size`,
    SentencePiece's own sampling of that many sentences (it still reads the whole file)."""
    import sentencepiece as spm

    corpus = os.path.join(workdir, "sp_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as handle:
        for document in documents:
            handle.write(document.replace("\n", " ") + "\n")
    start = time.perf_counter()
    prefix = os.path.join(workdir, "sp")
    spm.SentencePieceTrainer.train(
        input=corpus,
        model_prefix=prefix,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=0.9995,
        num_threads=1,
        minloglevel=2,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        split_digits=False,
        max_sentence_length=1 << 16,
        input_sentence_size=sample_size,
        shuffle_input_sentence=bool(sample_size),
    )
    learn_seconds = time.perf_counter() - start
    with open(prefix + ".model", "rb") as handle:
        encode, decode = sentencepiece_of(handle.read())
    return learn_seconds, encode, decode


def load_average() -> float:
    return os.getloadavg()[0]


def bench_corpus(label: str, documents: List[str], args, workdir: str) -> Dict[str, object]:
    """Every tokenizer on one corpus (see the module docstring)."""
    rows, packing = [], None
    sample = documents[:200]
    our_learn_seconds, encode, decode, count, proto = ours(
        documents, args.vocab_size, os.path.join(workdir, "ours"), args.sample_size
    )
    from components.tokenizer.graph import GraphTokenizer

    variants = [
        ("ours", our_learn_seconds, encode, decode, count),
        ("ours: op only", None, *graph_op(GraphTokenizer(proto))),
    ]
    sp_encode, sp_decode = sentencepiece_of(proto)
    variants.append(("sp (our model)", None, sp_encode, sp_decode, list_count(sp_encode)))
    words = ours(documents, args.vocab_size, os.path.join(workdir, "words"), args.sample_size, pieces_cross_words=False)
    variants.append(("ours: words", *words[:4]))
    for name, build in (("sentencepiece", sentencepiece_bpe), ("hf-bytelevel", hf_bytelevel)):
        learn_seconds, encode, decode = build(documents, args.vocab_size, workdir)
        variants.append((name, learn_seconds, encode, decode, list_count(encode)))
    hf_encode = variants[-1][2]
    variants.append(("ours: BPE graph", None, *bpe_graph_of(hf_encode.tokenizer, workdir)))
    for name, learn_seconds, encode, decode, count in variants:
        before = load_average()
        result = measure(count, documents, args.batch_size)
        result.update(
            name=name,
            learn_seconds=learn_seconds,
            round_trip=decode(encode(sample)) == sample,
            load_before=before,
            load_after=load_average(),
        )
        if name == "ours: BPE graph":
            result["ids_equal_hf"] = encode(sample) == hf_encode(sample)
        rows.append(result)
        if name == "ours":
            lengths = [len(ids) for batch in batches(documents, args.batch_size) for ids in encode(batch)]
            packing = packing_waste(lengths, args.context_length)
        print(f"  {label}: measured {name}", flush=True)
    native = next(row for row in rows if row["name"] == "sentencepiece")
    for row in rows:
        row["mb_per_s_vs_native"] = row["mb_per_s"] / native["mb_per_s"]
        row["bytes_per_token_vs_native"] = row["bytes_per_token"] / native["bytes_per_token"] - 1
        row["valid"] = max(row["load_before"], row["load_after"]) <= MAX_VALID_LOAD
    return {
        "corpus": label,
        "documents": len(documents),
        "mb": sum(len(d.encode()) for d in documents) / 1e6,
        "rows": rows,
        "packing": packing,
    }


def bench_large(documents: List[str], args, workdir: str) -> Dict[str, object]:
    """Learning time on the corpus replicated to about `args.large_mb` MB: ours (Beam sample of
    `args.sample_size` chunks, then SentencePiece) and native SentencePiece with its own sampling."""
    size = sum(len(d.encode()) for d in documents)
    copies = max(1, round(args.large_mb * 1e6 / size))
    large = documents * copies
    examples = write_examples(large, os.path.join(workdir, "large.gz"))
    before = load_average()
    learned = learn_ours(examples, args.vocab_size, args.sample_size, workdir)
    after_ours = load_average()
    native_seconds = sentencepiece_bpe(large, args.vocab_size, workdir, sample_size=args.sample_size)[0]
    after = load_average()
    return {
        "mb": size * copies / 1e6,
        "copies": copies,
        "ours_sample_seconds": learned["sample_seconds"],
        "ours_learn_seconds": learned["learn_seconds"],
        "ours_sample_chunks": learned["sample_chunks"],
        "ours_sample_mb": learned["sample_mb"],
        "native_sampled_learn_seconds": native_seconds,
        "load_before": before,
        "load_after_ours": after_ours,
        "load_after": after,
        "valid": max(before, after_ours, after) <= MAX_VALID_LOAD,
    }


def print_tables(corpora: List[Dict[str, object]], large: Dict[str, object]) -> None:
    header = (
        f"{'corpus':<15} {'tokenizer':<15} {'learn s':>8} {'MB/s':>6} {'x native':>8} {'bytes/tok':>9} "
        f"{'vs native':>9} {'round trip':>10} {'load':>9} {'valid':>6}"
    )
    print(header)
    for corpus in corpora:
        for row in corpus["rows"]:
            learn_s = "-" if row["learn_seconds"] is None else f"{row['learn_seconds']:.1f}"
            print(
                f"{corpus['corpus']:<15} {row['name']:<15} {learn_s:>8} {row['mb_per_s']:>6.2f} "
                f"{row['mb_per_s_vs_native']:>8.2f} {row['bytes_per_token']:>9.3f} {row['bytes_per_token_vs_native']:>+9.1%} "
                f"{str(row['round_trip']):>10} {row['load_before']:>4.1f}/{row['load_after']:<4.1f} "
                f"{'yes' if row['valid'] else 'LOADED':>6}"
            )
    if large:
        print(
            f"\nlearning on {large['mb']:.0f} MB ({large['copies']} copies): ours {large['ours_sample_seconds']:.1f} s Beam "
            f"sample ({large['ours_sample_chunks']} chunks, {large['ours_sample_mb']:.1f} MB) + "
            f"{large['ours_learn_seconds']:.1f} s SentencePiece; native SentencePiece with input_sentence_size="
            f"{large['ours_sample_chunks']}: {large['native_sampled_learn_seconds']:.1f} s; load "
            f"{large['load_before']:.1f} -> {large['load_after']:.1f} ({'valid' if large['valid'] else 'LOADED'})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=DEFAULT_CORPUS, help="A .txt corpus (blank-line separated documents).")
    parser.add_argument("--zh-mb", type=float, default=1.0, help="Size of the synthetic Chinese corpus (0 skips it).")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--sample-size", type=int, default=20_000, help="Our learner's sample (tokenizer.sample_size).")
    parser.add_argument(
        "--large-mb", type=float, default=100.0, help="Replicated corpus for learning time (0 skips it)."
    )
    parser.add_argument("--context-length", type=int, default=128, help="Block length for the packing comparison.")
    args = parser.parse_args()
    import tensorflow as tf

    # One thread for TensorFlow too, like the other tokenizers (set before TensorFlow runs anything).
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    if not os.path.exists(args.corpus):
        sys.exit(f"corpus not found: {args.corpus} (the shared benchmark corpus lives outside the repository)")
    from benchmarks.zh_corpus import generate

    english = load_documents(args.corpus)
    corpora_documents = [("tinyshakespeare", english)]
    if args.zh_mb:
        corpora_documents.append(("zh-synthetic", generate(int(args.zh_mb * 1e6))))
    start_load = os.getloadavg()
    corpora, large = [], None
    with tempfile.TemporaryDirectory() as workdir:
        for label, documents in corpora_documents:
            print(
                f"{label}: {len(documents)} documents, {sum(len(d.encode()) for d in documents) / 1e6:.2f} MB, "
                f"vocabulary {args.vocab_size}, batch {args.batch_size}",
                flush=True,
            )
            os.makedirs(os.path.join(workdir, label, "ours"))
            os.makedirs(os.path.join(workdir, label, "words"))
            corpora.append(bench_corpus(label, documents, args, os.path.join(workdir, label)))
        if args.large_mb:
            large = bench_large(english, args, workdir)
    print_tables(corpora, large)
    packing = corpora[0]["packing"]
    print(
        f"\npacking at context {args.context_length} ({corpora[0]['corpus']}, ours): packed blocks waste "
        f"{packing['packed_waste']:.4%} (tail tokens dropped); one padded document per sequence wastes "
        f"{packing['padded_waste']:.2%} of positions on padding and truncates {packing['truncated']:.2%} of tokens"
    )
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    machine = {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpus": os.cpu_count(),
        "load_average_start": start_load,
        "load_average_end": os.getloadavg(),
    }
    with open(RESULTS, "w", encoding="utf-8") as handle:
        json.dump(
            {
                "vocab_size": args.vocab_size,
                "batch_size": args.batch_size,
                "sample_size": args.sample_size,
                "corpus_path": os.path.abspath(args.corpus),
                "machine": machine,
                "corpora": corpora,
                "large": large,
                "max_valid_load": MAX_VALID_LOAD,
            },
            handle,
            indent=2,
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
