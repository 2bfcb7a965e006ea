"""Instruction-tuning throughput: our Trainer's conversation path against TRL's SFTTrainer with PEFT
LoRA, both packing, same data, same model shape (GPT-2 124M), in one run; and how full packed
rows are against one conversation per padded row.

The data is the bundled instruction set (data/instructions/support_conversations.jsonl: support
tickets and replies, system + user + assistant turns), rendered once with the project's chat code
(`ChatGraph.training_example`, as Transform does) through a GPT-2-shaped tokenizer directory with
the ChatML template (`chat_template.DEFAULT_TEMPLATE` as `chat_template.jinja`, <|im_start|> and
<|im_end|> added as special tokens to a byte-level BPE learned from the bundled corpus by
data/make_tiny_checkpoint.write_tokenizer). Both sides get these token ids and assistant masks;
the reference side first checks that transformers' `apply_chat_template` on the same directory
gives the same ids (benchmarks/reference_sft_train.py).

    ours        components/trainer: the conversations written as Transform writes them (token_ids +
                loss_mask, GZIP TFRecords), `packing.packed_batches` (shuffled, packed in order into
                rows of context + 1 tokens, segment ids, positions restarting per conversation,
                assistant-only weights) and `LanguageModelTrainer` with the backbone's block-diagonal
                causal mask, LoRA rank r on the attention projections (training.lora), AdamW, clip 1.0,
                in this process (the project's environment);
    TRL         SFTTrainer (TRL 0.29) + PEFT LoRA of the same rank and targets, packing=True (best-fit
                decreasing, padding-free), labels only on the assistant masks, in the reference
                environment as a subprocess (benchmarks/reference_sft_train.py says how).

Model: GPT-2 124M's shape (12 layers, width 768, 12 heads, MLP 3072, tanh GELU, head tied to the
embedding, vocabulary 50,257), random weights (speed does not depend on them), no dropout. Both
sides run on the same threads: torch.set_num_threads(--threads, default every core); TensorFlow
with the thread pools the Trainer leaves at their defaults (every core). Precision: float32 by
default on both; `--precision mixed_bfloat16` runs ours under that policy and TRL with bf16=True.

Each side trains `--warmup-steps` steps, then `--steps` timed steps (wall time between the end of
the last warm-up step and the end of the last step: data loading, forward, backward, optimizer).
Counted over the timed steps' batches: supervised tokens (targets with a loss weight), real tokens
(conversation tokens in the inputs, padding excluded) and computed tokens (the inputs' size: ours
is rows x context; TRL's padding-free batch has no padding, so its real and computed tokens are
the same).

Packing efficiency (ours, one pass over the conversations, file order): `packing.packing_stats`
against one conversation per row padded to the same length, as supervised and real tokens per row
token; TRL's packed rows are shown beside them.

Usage:
    python benchmarks/sft_throughput.py [--context-length 512] [--batch-size 4] [--steps 12] [--warmup-steps 2]
        [--lora-rank 8] [--precision float32] [--threads 2] [--skip-reference] [--keep DIR] [--wait-for-quiet 600]

Prints tables and writes benchmarks/results/sft_throughput.json (sft_throughput_mixed_bfloat16.json
with that precision). Refuses to start above load 1.5
unless --allow-high-load (then the results are marked NOT VALID).
"""

import argparse
import json
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "data"))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import machine  # noqa: E402
from checkpoint_import import SHAPES  # noqa: E402

CONVERSATIONS = os.path.join(ROOT, "data", "instructions", "support_conversations.jsonl")
GPT2 = SHAPES["gpt2-124m"]


# --- the data, prepared once for both sides -------------------------------------------------------


def write_tokenizer_dir(directory: str) -> int:
    """A GPT-2-shaped checkpoint's tokenizer files with the ChatML template (module docstring);
    returns the tokenizer's size (at most the model's vocabulary)."""
    from make_tiny_checkpoint import write_tokenizer

    from components.tokenizer.chat_template import DEFAULT_SPECIAL_TOKENS, DEFAULT_TEMPLATE, TEMPLATE_FILE

    os.makedirs(directory, exist_ok=True)
    size = write_tokenizer(
        directory,
        vocab_size=GPT2["vocab_size"] - len(DEFAULT_SPECIAL_TOKENS),
        model_max_length=GPT2["n_positions"],
        added_special_tokens=DEFAULT_SPECIAL_TOKENS,
    )
    with open(os.path.join(directory, TEMPLATE_FILE), "w", encoding="utf-8") as handle:
        handle.write(DEFAULT_TEMPLATE)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as handle:
        json.dump({"architectures": ["GPT2LMHeadModel"], **GPT2, "bos_token_id": 0, "eos_token_id": 0}, handle)
    return size


def read_conversations(path: str) -> list:
    """The `messages` of each record of the bundled instruction set."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line)["messages"] for line in handle if line.strip()]


def tokenize_conversations(tokenizer_dir: str, conversations: list, batch: int = 256) -> tuple:
    """(token ids, loss masks) per conversation, as Transform derives them (ChatGraph.training_example)."""
    import tensorflow as tf

    from components.tokenizer import chat_setup, loaded
    from components.tokenizer.chat_graph import ChatGraph

    tokenizer = loaded.load(tokenizer_dir)
    spec = chat_setup.checkpoint_chat_of(tokenizer, tokenizer_dir)
    graph = ChatGraph(spec.grammar, spec.special_ids, tokenizer.graph().tokenize)
    all_ids, all_masks = [], []
    for start in range(0, len(conversations), batch):
        chunk = conversations[start : start + batch]
        width = max(len(messages) for messages in chunk)
        roles = [[m["role"] for m in messages] + [""] * (width - len(messages)) for messages in chunk]
        contents = [[m["content"] for m in messages] + [""] * (width - len(messages)) for messages in chunk]
        ids, mask, accepted = graph.training_example(tf.constant(roles), tf.constant(contents))
        if not accepted.numpy().all():
            raise ValueError(
                f"{CONVERSATIONS}: the ChatML template refuses a conversation in records {start}-{start + batch}"
            )
        all_ids += ids.to_list()
        all_masks += mask.to_list()
    return all_ids, all_masks


def write_transformed(path: str, ids: list, masks: list) -> dict:
    """The conversations as Transform writes them (GZIP TFRecords of token_ids + loss_mask); returns
    the feature spec the Trainer parses them with."""
    import tensorflow as tf

    from components.transform.preprocessing import LOSS_MASK_KEY, TOKEN_IDS_KEY

    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for token_ids, mask in zip(ids, masks):
            features = {
                TOKEN_IDS_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=token_ids)),
                LOSS_MASK_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=mask)),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
    return {key: tf.io.RaggedFeature(tf.int64, value_key=key) for key in (TOKEN_IDS_KEY, LOSS_MASK_KEY)}


def padded_stats(ids: list, masks: list, context_length: int) -> dict:
    """One conversation per row of context + 1 tokens, padded (cut as packing cuts, dropped when no
    supervised target is left), counted as packing.PackingStats counts packed rows."""
    row_tokens = context_length + 1
    rows = real = supervised = 0
    for token_ids, mask in zip(ids, masks):
        kept = min(len(token_ids), row_tokens)
        targets = sum(mask[1:kept])  # the first token has no target
        if targets:
            rows, real, supervised = rows + 1, real + kept, supervised + targets
    return {
        "rows": rows,
        "real_tokens": real,
        "supervised_tokens": supervised,
        "row_tokens": row_tokens,
        "real_fraction": real / max(rows * row_tokens, 1),
        "supervised_fraction": supervised / max(rows * context_length, 1),
    }


# --- ours ---------------------------------------------------------------------------------------------


def measure_ours(files: str, spec: dict, model_config, args, policy: str, jit: str) -> dict:
    """Trains warm-up + timed steps on the packed conversations; the timed steps' seconds and the
    tokens of their batches (counted on a second copy of the same seeded input pipeline)."""
    import tensorflow as tf
    from train_throughput import make_trainer

    from components.trainer.model.dtype_policy import keras_policy
    from components.trainer.options import TrainingOptions
    from components.trainer.training import data, packing

    shuffle_buffer = TrainingOptions().shuffle_buffer

    def batches():
        return packing.packed_batches(
            files,
            spec,
            model_config.context_length,
            args.batch_size,
            shuffle_buffer=shuffle_buffer,
            seed=0,
            repeat=True,
        )

    total = args.warmup_steps + args.steps
    strategy = tf.distribute.get_strategy()
    reported = []
    with keras_policy(policy):
        trainer = make_trainer(
            model_config, GPT2["vocab_size"], args.batch_size, total, 1, 1, policy, jit, args.lora_rank
        )
        start = time.perf_counter()
        trainer.train(
            lambda _: iter(data.distributed_blocks(strategy, batches, args.batch_size)),
            on_report=lambda report: reported.append((time.perf_counter(), report)),
        )
    if len(reported) != total:
        raise RuntimeError(f"expected {total} step reports, got {len(reported)}")
    supervised = real = 0
    for index, batch in enumerate(batches().take(total)):
        if index >= args.warmup_steps:
            supervised += int(tf.reduce_sum(batch["weights"]).numpy())
            real += int(tf.reduce_sum(tf.cast(batch["segments"] > 0, tf.int64)).numpy())
    ends = [when for when, _ in reported]
    return {
        "warmup_seconds": ends[args.warmup_steps - 1] - start,
        "seconds": ends[-1] - ends[args.warmup_steps - 1],
        "steps": args.steps,
        "supervised_tokens": supervised,
        "real_tokens": real,
        "computed_tokens": args.steps * args.batch_size * model_config.context_length,
        "final_loss": reported[-1][1].loss,
        "xla": trainer.jit_compile,
        "step_seconds": [round(end - begin, 3) for begin, end in zip([start] + ends[:-1], ends)],
        "trainable_parameters": sum(int(tf.size(v)) for v in trainer.model.trainable_variables),
    }


# --- the reference ------------------------------------------------------------------------------------


def measure_trl(args, model_config, tokenizer_dir: str, data_path: str, precision: str) -> dict:
    """Runs benchmarks/reference_sft_train.py in the reference environment."""
    from train_throughput import reference_shape_arguments, run_reference

    return run_reference(
        args.reference_python,
        "reference_sft_train.py",
        [
            *reference_shape_arguments(model_config, GPT2["vocab_size"]),
            "--data",
            data_path,
            "--tokenizer",
            tokenizer_dir,
            "--batch-size",
            str(args.batch_size),
            "--steps",
            str(args.steps),
            "--warmup-steps",
            str(args.warmup_steps),
            "--lora-rank",
            str(args.lora_rank),
            "--threads",
            str(args.threads),
            "--precision",
            precision,
        ],
    )


# --- the report ---------------------------------------------------------------------------------------


def with_rates(row: dict) -> dict:
    seconds = row["seconds"]
    return {
        **row,
        "supervised_tokens_per_s": row["supervised_tokens"] / seconds,
        "real_tokens_per_s": row["real_tokens"] / seconds,
        "computed_tokens_per_s": row["computed_tokens"] / seconds,
        "supervised_per_computed_token": row["supervised_tokens"] / row["computed_tokens"],
    }


def print_tables(rows: dict, packing_rows: dict) -> None:
    print(
        "| side | timed steps | seconds | supervised tokens/s | real tokens/s | computed tokens/s | supervised per computed token |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(
            f"| {name} | {row['steps']} | {row['seconds']:.1f} | {row['supervised_tokens_per_s']:,.0f} | "
            f"{row['real_tokens_per_s']:,.0f} | {row['computed_tokens_per_s']:,.0f} | {row['supervised_per_computed_token']:.3f} |"
        )
    if len(rows) == 2:
        ours, trl = rows.values()
        print(
            f"\nours / TRL: supervised tokens/s {ours['supervised_tokens_per_s'] / trl['supervised_tokens_per_s']:.2f}x, "
            f"real tokens/s {ours['real_tokens_per_s'] / trl['real_tokens_per_s']:.2f}x"
        )
    print("\n| rows of the whole set (one pass) | rows | real tokens per row token | supervised tokens per row token |")
    print("|---|---:|---:|---:|")
    for name, row in packing_rows.items():
        print(f"| {name} | {row['rows']:,} | {row['real_fraction']:.3f} | {row['supervised_fraction']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context-length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12, help="timed steps, after --warmup-steps")
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--precision", default="float32", choices=["float32", "mixed_bfloat16"])
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads on the TRL side")
    parser.add_argument("--conversations", type=int, default=0, help="use only the first N conversations (0: all)")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument(
        "--reference-python", default=os.path.expanduser("~/.cache/textgen-tfx/bench-reference/bin/python")
    )
    parser.add_argument(
        "--keep", metavar="DIR", help="write the tokenizer and data here (default: a temporary directory)"
    )
    machine.add_load_arguments(parser)
    args = parser.parse_args()
    if args.warmup_steps < 1 or args.steps < 1:
        parser.error("--warmup-steps and --steps must be at least 1")
    guard = machine.LoadGuard(args)

    import tensorflow as tf

    from components.trainer.options import ModelOptions
    from components.trainer.training import packing
    from components.trainer.training.precision import resolve_jit_compile

    workdir = args.keep or tempfile.mkdtemp(prefix="sft_throughput_")
    tokenizer_dir = os.path.join(workdir, "tokenizer")
    tokenizer_size = write_tokenizer_dir(tokenizer_dir)
    conversations = read_conversations(CONVERSATIONS)
    if args.conversations:
        conversations = conversations[: args.conversations]
    ids, masks = tokenize_conversations(tokenizer_dir, conversations)
    files = os.path.join(workdir, "conversations.tfrecord.gz")
    spec = write_transformed(files, ids, masks)
    data_path = os.path.join(workdir, "conversations.json")
    with open(data_path, "w", encoding="utf-8") as handle:
        json.dump({"input_ids": ids, "assistant_masks": masks, "messages": conversations}, handle)
    lengths = sorted(len(token_ids) for token_ids in ids)
    content_bytes = sum(len(message["content"].encode("utf-8")) for messages in conversations for message in messages)
    print(
        f"{len(ids):,} conversations, {sum(lengths):,} tokens (median {lengths[len(lengths) // 2]}, max {lengths[-1]}; "
        f"{content_bytes / sum(lengths):.2f} content bytes per token), {sum(map(sum, masks)):,} in assistant turns; "
        f"tokenizer of {tokenizer_size:,} tokens, model vocabulary {GPT2['vocab_size']:,}",
        flush=True,
    )

    model_config = ModelOptions(preset="gpt2-124m", mlp="gelu_tanh", context_length=args.context_length)
    jit = "on" if resolve_jit_compile("auto", "cpu", args.precision) else "off"
    rows = {}
    ours = measure_ours(files, spec, model_config, args, args.precision, jit)
    rows[f"ours ({args.precision}, XLA {'on' if ours['xla'] else 'off'})"] = with_rates(ours)
    print(f"  ours: {rows[next(iter(rows))]['supervised_tokens_per_s']:,.0f} supervised tokens/s", flush=True)
    trl = None
    if not args.skip_reference:
        trl_precision = "bfloat16" if args.precision == "mixed_bfloat16" else "float32"
        trl = measure_trl(args, model_config, tokenizer_dir, data_path, trl_precision)
        rows[f"TRL SFTTrainer + PEFT ({trl_precision}, {trl['attention']})"] = with_rates(trl)
        print(f"  TRL: {rows[list(rows)[-1]]['supervised_tokens_per_s']:,.0f} supervised tokens/s", flush=True)

    packed = packing.packing_stats(files, spec, args.context_length).to_dict()
    packing_rows = {
        "ours packed": packed,
        "ours padded (one conversation per row)": padded_stats(ids, masks, args.context_length),
    }
    if trl:
        trl_rows = trl["packing"]
        packing_rows["TRL bfd packed (rows before flattening)"] = {
            "rows": trl_rows["rows"],
            "real_fraction": trl_rows["real_tokens"] / (trl_rows["rows"] * trl_rows["row_tokens"]),
            "supervised_fraction": trl_rows["supervised_tokens"] / (trl_rows["rows"] * trl_rows["row_tokens"]),
        }

    load = guard.finish()
    print(f"\n{machine.command_line()}\n{guard.banner()}")
    print(
        f"GPT-2 124M shape, LoRA rank {args.lora_rank}, rows of {args.context_length} tokens, batch {args.batch_size}, "
        f"{args.warmup_steps} warm-up + {args.steps} timed steps; TF intra/inter-op threads "
        f"{tf.config.threading.get_intra_op_parallelism_threads()}/{tf.config.threading.get_inter_op_parallelism_threads()} "
        f"(0 = every core), torch threads {trl['threads'] if trl else '-'}\n"
    )
    print_tables(rows, packing_rows)
    path = machine.write_results(
        "sft_throughput" + ("" if args.precision == "float32" else f"_{args.precision}"),
        {
            "command": machine.command_line(),
            "load": load,
            "machine": {**machine.machine_description(), "platform": platform.platform()},
            "model": {**model_config.model_dump(), "vocab_size": GPT2["vocab_size"], "lora_rank": args.lora_rank},
            "data": {
                "conversations": len(ids),
                "tokens": sum(lengths),
                "assistant_tokens": sum(map(sum, masks)),
                "median_tokens": lengths[len(lengths) // 2],
                "max_tokens": lengths[-1],
                "content_bytes_per_token": content_bytes / sum(lengths),
                "tokenizer_size": tokenizer_size,
            },
            "batch_size": args.batch_size,
            "precision": args.precision,
            "threads": args.threads,
            "tf_threads": {
                "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
            },
            "rows": rows,
            "packing": packing_rows,
            "ratio_supervised_tokens_per_s": (
                list(rows.values())[0]["supervised_tokens_per_s"] / list(rows.values())[1]["supervised_tokens_per_s"]
            )
            if trl
            else None,
            "reference": {
                k: v
                for k, v in trl.items()
                if k
                in (
                    "versions",
                    "padding_free",
                    "ids_checked_against_transformers",
                    "config",
                    "attention",
                    "threads",
                    "trainable_parameters",
                )
            }
            if trl
            else None,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
