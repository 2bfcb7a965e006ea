#!/usr/bin/env bash
# Builds the separate environment for the Hugging Face datatrove baseline that
# benchmarks/ingest_throughput.py --datatrove runs (benchmarks/datatrove_baseline.py). It is never
# the product's environment: datatrove is not in requirements.lock.
#
# datatrove's English word tokenizer is spaCy's blank "en" tokenizer (no model download); its
# language filter needs a fastText model downloaded at run time, so the baseline leaves it out.
set -euo pipefail
ENV_DIR="${1:-$HOME/.cache/textgen-tfx/bench-datatrove}"
PYTHON311="${PYTHON311:-python3.11}"
if [ -x "$ENV_DIR/bin/python" ] && "$ENV_DIR/bin/python" -c "import datatrove, spacy, xxhash, orjson" 2>/dev/null; then
  echo "$ENV_DIR"
  exit 0
fi
"$PYTHON311" -m venv "$ENV_DIR" >&2
"$ENV_DIR/bin/pip" install --quiet --disable-pip-version-check "datatrove[processing]==0.10.1" "spacy>=3.7,<4" orjson >&2
echo "$ENV_DIR"
