"""Reference side of sft_throughput.py: TRL's SFTTrainer with PEFT LoRA and packing, on the CPU.

Runs in the separate reference environment (benchmarks/make_reference_env.sh: torch, transformers,
peft, trl, datasets, accelerate), never in the product's. It reads the conversations
sft_throughput.py tokenized with the project's chat code (`--data`: JSON with `input_ids` and
`assistant_masks` per conversation, and the `messages`), and first checks that transformers'
`apply_chat_template` on the tokenizer directory (`--tokenizer`, the same files and template)
gives the same ids for the first `--check` conversations, so both sides train on identical data.

Then SFTTrainer as its documentation sets it up for conversations with assistant-only loss and
packing, as TRL 0.29 implements them:

- the data set is already tokenized (`input_ids` + `assistant_masks`), so SFTTrainer skips its own
  rendering; its collator sets the label of every token outside `assistant_masks` to -100 (it does
  so whenever the column is there; `assistant_only_loss=True` itself is refused for tokenized
  data, and with messages it needs `{% generation %}` markers that the ChatML template lacks);
- `packing=True` with the default `packing_strategy="bfd"` (best-fit decreasing: whole
  conversations, longer ones cut at `max_length`), which turns on padding-free batches: the rows
  of a batch are flattened into one sequence with `position_ids` restarting per conversation and
  the first token of each conversation unlabelled; transformers 4.57's GPT-2 (SDPA attention)
  turns those position ids into a block-diagonal causal mask (masking_utils
  `find_packed_sequence_indices`), so no conversation sees another;
- gradient checkpointing off (TRL's SFTConfig turns it on by default, trading time for memory; the
  project's `training.recompute` is off by default; `--gradient-checkpointing` turns it on);
- LoRA through `peft_config` (reference_gpt2_train.lora_config: rank r on c_attn and attn.c_proj),
  the model GPT2LMHeadModel of the given shape, random weights, no dropout.

Each step's wall time is taken at `on_step_end` (a TrainerCallback); the supervised targets
(labels != -100) and the tokens of each step's batch are counted in `compute_loss`. Prints one
JSON line.
"""

import argparse
import json
import tempfile
import time

from reference_gpt2_train import add_shape_arguments, gpt2_config, lora_config


def check_same_ids(tokenizer, data: dict, count: int) -> int:
    """Raises unless `apply_chat_template` gives the project's ids for the first `count` conversations."""
    for index, (messages, expected) in enumerate(zip(data["messages"][:count], data["input_ids"][:count])):
        ids = tokenizer.apply_chat_template(messages, tokenize=True)
        if list(ids) != list(expected):
            raise SystemExit(
                f"conversation {index}: transformers' apply_chat_template ids differ from the project's "
                f"({len(ids)} vs {len(expected)} tokens)"
            )
    return min(count, len(data["input_ids"]))


def main() -> None:
    parser = argparse.ArgumentParser()
    add_shape_arguments(parser)
    parser.add_argument("--data", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True, help="measured steps")
    parser.add_argument("--warmup-steps", type=int, required=True)
    parser.add_argument("--lora-rank", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument(
        "--precision",
        choices=["float32", "bfloat16"],
        default="float32",
        help="bfloat16: TrainingArguments(bf16=True), torch.autocast on the CPU",
    )
    parser.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="TRL's default (SFTConfig.gradient_checkpointing=True): recompute activations in the "
        "backward pass; off unless given, as the project's training.recompute is off by default",
    )
    parser.add_argument(
        "--check", type=int, default=200, help="conversations whose ids are checked against transformers"
    )
    args = parser.parse_args()

    import datasets
    import peft
    import torch
    import transformers
    import trl
    from transformers import AutoTokenizer, GPT2LMHeadModel, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.data, encoding="utf-8") as handle:
        data = json.load(handle)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    checked = check_same_ids(tokenizer, data, args.check)
    train = datasets.Dataset.from_dict({"input_ids": data["input_ids"], "assistant_masks": data["assistant_masks"]})
    model = GPT2LMHeadModel(gpt2_config(args, attn_implementation="sdpa"))

    step_ends, supervised, tokens = [], [], []

    class StepClock(TrainerCallback):
        def on_step_end(self, *_args, **_kwargs):
            step_ends.append(time.perf_counter())

    class CountingSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, *rest, **kwargs):
            if model.training:
                supervised.append(int((inputs["labels"] != -100).sum()))
                tokens.append(int(inputs["input_ids"].numel()))
            return super().compute_loss(model, inputs, *rest, **kwargs)

    total_steps = args.warmup_steps + args.steps
    config = SFTConfig(
        output_dir=tempfile.mkdtemp(),
        max_length=args.context_length,
        packing=True,
        packing_strategy="bfd",
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=1,
        max_steps=total_steps,
        learning_rate=3e-4,
        weight_decay=0.01,
        adam_beta2=0.95,
        max_grad_norm=1.0,
        optim="adamw_torch",
        bf16=args.precision == "bfloat16",
        use_cpu=True,
        dataloader_num_workers=0,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=0,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    trainer = CountingSFTTrainer(
        model=model,
        args=config,
        train_dataset=train,
        processing_class=tokenizer,
        peft_config=lora_config(args.lora_rank),
        callbacks=[StepClock()],
    )
    packed = trainer.train_dataset
    row_lengths = [sum(lengths) for lengths in packed["seq_lengths"]]
    # A conversation's first token (never an assistant token) is the only one the collator unlabels besides the masks.
    packed_supervised = sum(sum(mask) for mask in packed["assistant_masks"])
    started = time.perf_counter()
    trainer.train()
    steps_done = len(step_ends)
    if steps_done != total_steps or len(supervised) != total_steps:
        raise SystemExit(f"expected {total_steps} steps, timed {steps_done} and counted {len(supervised)}")
    measured = slice(args.warmup_steps, total_steps)
    seconds = step_ends[-1] - step_ends[args.warmup_steps - 1]
    print(
        json.dumps(
            {
                "versions": {
                    "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "peft": peft.__version__,
                    "trl": trl.__version__,
                    "datasets": datasets.__version__,
                },
                "threads": torch.get_num_threads(),
                "attention": model.config._attn_implementation,
                "padding_free": trainer.padding_free,
                "ids_checked_against_transformers": checked,
                "config": {
                    key: getattr(config, key)
                    for key in (
                        "packing",
                        "packing_strategy",
                        "max_length",
                        "gradient_checkpointing",
                        "per_device_train_batch_size",
                        "bf16",
                        "optim",
                        "max_grad_norm",
                    )
                },
                "trainable_parameters": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
                "warmup_seconds": step_ends[args.warmup_steps - 1] - started,
                "seconds": seconds,
                "steps": args.steps,
                "step_seconds": [round(end - begin, 3) for begin, end in zip([started] + step_ends[:-1], step_ends)],
                "supervised_tokens": sum(supervised[measured]),
                "real_tokens": sum(tokens[measured]),
                "computed_tokens": sum(tokens[measured]),
                "packing": {
                    "rows": len(row_lengths),
                    "row_tokens": args.context_length,
                    "real_tokens": sum(row_lengths),
                    "supervised_tokens": packed_supervised,
                },
            }
        )
    )


if __name__ == "__main__":
    main()
