"""Reference side of train_throughput.py: Hugging Face GPT-2 trained with PyTorch on the CPU.

Runs in the separate reference environment (benchmarks/make_reference_env.sh), never in the
product's. Builds `GPT2LMHeadModel` from a `GPT2Config` of the given shape (random init, nothing
downloaded), trains on random token ids with torch.optim.AdamW, eager and under torch.compile,
optionally with PEFT LoRA adapters (--lora-rank), and prints one JSON line: [{"mode", "tokens_per_s", "first_call_extra_s", "final_loss"}, ...].
"""

import argparse
import json
import os
import time


def train(model, optimizer, batches, steps: int) -> tuple:
    """Seconds for `steps` optimizer steps and the last loss."""
    import torch

    start = time.perf_counter()
    for index in range(steps):
        inputs = batches[index % len(batches)]
        loss = model(input_ids=inputs, labels=inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start, float(loss.detach())


def add_shape_arguments(parser: argparse.ArgumentParser) -> None:
    """The model shape flags (what train_throughput.py and sft_throughput.py pass)."""
    for name in ("layers", "heads", "width", "mlp", "context-length", "vocab-size"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--activation", default="gelu_new")


def gpt2_config(args: argparse.Namespace, **extra):
    """A `GPT2Config` of the shape flags, without dropout, head tied to the embedding."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=args.vocab_size,
        n_positions=args.context_length,
        n_embd=args.width,
        n_layer=args.layers,
        n_head=args.heads,
        n_inner=args.mlp,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        activation_function=args.activation,
        tie_word_embeddings=True,
        **extra,
    )


def lora_config(rank: int):
    """PEFT LoRA of `rank` on GPT-2's attention projections (c_attn, attn.c_proj; Conv1D, so
    fan_in_fan_out), as the project's `training.lora` targets `attention`."""
    from peft import LoraConfig

    return LoraConfig(
        r=rank, lora_alpha=16, lora_dropout=0.0, target_modules=r".*attn\.c_(attn|proj)", fan_in_fan_out=True
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    add_shape_arguments(parser)
    for name in ("batch-size", "steps"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--lora-rank", type=int, default=0, help="PEFT LoRA of this rank on the attention projections.")
    args = parser.parse_args()
    import torch
    from transformers import GPT2LMHeadModel

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    config = gpt2_config(args)
    batches = [torch.randint(0, args.vocab_size, (args.batch_size, args.context_length)) for _ in range(4)]
    tokens = args.batch_size * args.context_length * args.steps
    rows = []
    for mode in ("eager", "torch.compile"):
        model = GPT2LMHeadModel(config).train()
        if args.lora_rank:
            from peft import get_peft_model

            model = get_peft_model(model, lora_config(args.lora_rank))
        if mode == "torch.compile":
            model = torch.compile(model)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.01)
        warmup_seconds, _ = train(model, optimizer, batches, args.steps)
        seconds, loss = train(model, optimizer, batches, args.steps)
        rows.append(
            {
                "mode": mode,
                "tokens_per_s": tokens / seconds,
                "first_call_extra_s": max(warmup_seconds - seconds, 0.0),
                "final_loss": loss,
                "parameters": sum(p.numel() for p in model.parameters()),
            }
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
