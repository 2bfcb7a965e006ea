#!/usr/bin/env bash
# Builds the separate environment for the PyTorch / Hugging Face reference baselines used by
# benchmarks/train_throughput.py, benchmarks/decode_throughput.py and benchmarks/sft_throughput.py
# (TRL's SFTTrainer: trl, datasets, accelerate, pinned to the versions the benchmark was measured
# with). It is never the product's environment: the product must not depend on torch or transformers.
#
# torch==2.13.0 (CPU build) is the wheel pip finds locally on these machines; it is built for
# Python 3.11, so this environment uses python3.11.
set -euo pipefail
ENV_DIR="${1:-$HOME/.cache/textgen-tfx/bench-reference}"
PYTHON311="${PYTHON311:-python3.11}"
if [ -x "$ENV_DIR/bin/python" ] && "$ENV_DIR/bin/python" -c "import torch, transformers, sentencepiece, safetensors, peft, trl, datasets, accelerate" 2>/dev/null; then
  echo "$ENV_DIR"
  exit 0
fi
"$PYTHON311" -m venv "$ENV_DIR" >&2
"$ENV_DIR/bin/pip" install --quiet --disable-pip-version-check "torch==2.13.0" >&2
"$ENV_DIR/bin/pip" install --quiet --disable-pip-version-check "transformers>=4.45,<5" numpy sentencepiece protobuf safetensors "peft==0.21.2" >&2
"$ENV_DIR/bin/pip" install --quiet --disable-pip-version-check "trl==0.29.1" "datasets==5.0.1" "accelerate==1.16.0" >&2
echo "$ENV_DIR"
