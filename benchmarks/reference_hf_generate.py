"""The reference for decode_throughput.py: Hugging Face GPT2LMHeadModel.generate (KV cache), PyTorch CPU.

Runs in the separate benchmark env (benchmarks/make_reference_env.sh), never in the project env.
The model is built from a GPT2Config of the given shape with random weights, or loaded from the
local checkpoint directory `checkpoint` names (nothing is downloaded). Prints one JSON object: per batch size, first-token latency and new tokens/s of
greedy decoding with use_cache=True.

    python reference_hf_generate.py '{"layers": 12, "heads": 12, "dim": 768, "mlp": 3072,
        "vocab": 50257, "context": 1024, "prompt_tokens": 16, "new_tokens": 256, "batches": [1, 8],
        "threads": 2}'
"""

import json
import sys
import time

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def _timed_generate(model, prompt, new_tokens):
    """Seconds for one greedy generate() of exactly `new_tokens` tokens after `prompt`."""
    start = time.perf_counter()
    with torch.inference_mode():
        output = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
        )
    elapsed = time.perf_counter() - start
    assert output.shape[1] == prompt.shape[1] + new_tokens
    return elapsed


def main(spec: dict) -> dict:
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    if spec.get("checkpoint"):  # a local Hugging Face directory: nothing is downloaded
        model = GPT2LMHeadModel.from_pretrained(spec["checkpoint"], local_files_only=True).eval()
    else:
        config = GPT2Config(
            vocab_size=spec["vocab"],
            n_positions=spec["context"],
            n_embd=spec["dim"],
            n_layer=spec["layers"],
            n_head=spec["heads"],
            n_inner=spec["mlp"],
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        model = GPT2LMHeadModel(config).eval()
    results = {"torch": torch.__version__, "threads": torch.get_num_threads(), "batches": {}}
    for batch in spec["batches"]:
        prompt = torch.randint(2, spec["vocab"], (batch, spec["prompt_tokens"]))
        _timed_generate(model, prompt, 2)  # warm-up
        first_token = min(_timed_generate(model, prompt, 1) for _ in range(3))
        totals = [_timed_generate(model, prompt, spec["new_tokens"]) for _ in range(spec.get("repeats", 1))]
        total = float(np.median(totals))
        results["batches"][str(batch)] = {
            "first_token_s": first_token,
            "total_s": total,
            "total_s_each": totals,
            "new_tokens": spec["new_tokens"],
            "tokens_per_s": batch * spec["new_tokens"] / total,
        }
    return results


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
