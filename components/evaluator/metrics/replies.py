"""Quality of a model trained on conversations: the likelihood of the replies.

A chat model is trained on its replies only (the loss mask), so its quality is measured there,
each conversation rendered through the model's own chat template (`score_replies`, export.py):

- **perplexity per reply token** of the candidate, over the eval split's conversations;
- **a unigram reference** of reply tokens: each token's frequency among the train split's reply
  tokens (the masked ones; add-one-half smoothed, perplexity.unigram_reference), scored on the eval
  split's reply tokens: the relative quality gate compares the candidate with it, as for text;
- **bits per reply byte** of every model (candidate and baseline, each through its own template
  and tokenizer), which the change gate compares, whatever the two vocabularies.

The same structures as `perplexity.measure_quality` come back, so the quality gates are the
same. The conversations are scored in this process in batches (the eval split of an instruction
data set is small: conversations, not a corpus; a large one is sampled, `max_conversations`).
"""

import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from components.evaluator.metrics.perplexity import (
    BitsPerByteResult,
    PerplexityResult,
    UnigramReference,
    unigram_reference,
)
from components.file_patterns import matching_files
from components.model_client import ModelClient
from components.trainer.serving import signatures
from components.transform.preprocessing import CONTENTS_KEY, LOSS_MASK_KEY, ROLES_KEY, TOKEN_IDS_KEY

Conversation = List[Tuple[str, str]]


def read_conversations(file_patterns: Sequence[str], limit: int) -> List[Conversation]:
    """The first `limit` conversations (lists of (role, content)) of raw examples, in file order."""
    spec = {ROLES_KEY: tf.io.VarLenFeature(tf.string), CONTENTS_KEY: tf.io.VarLenFeature(tf.string)}
    conversations: List[Conversation] = []
    dataset = tf.data.TFRecordDataset(
        matching_files(list(file_patterns), "raw eval conversations"), compression_type="GZIP"
    )
    for serialized in dataset:
        parsed = tf.io.parse_single_example(serialized, spec)
        roles = [value.decode("utf-8") for value in parsed[ROLES_KEY].values.numpy()]
        contents = [value.decode("utf-8") for value in parsed[CONTENTS_KEY].values.numpy()]
        conversations.append(list(zip(roles, contents)))
        if len(conversations) >= limit:
            break
    return conversations


def reply_token_counts(file_patterns: Sequence[str], feature_spec) -> np.ndarray:
    """How often each token id is a supervised reply token in transformed conversations."""
    spec = {TOKEN_IDS_KEY: feature_spec[TOKEN_IDS_KEY], LOSS_MASK_KEY: feature_spec[LOSS_MASK_KEY]}
    counts = np.zeros(0, np.int64)
    files = matching_files(list(file_patterns), "transformed conversations")
    for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(1024):
        parsed = tf.io.parse_example(serialized, spec)
        ids = parsed[TOKEN_IDS_KEY].flat_values.numpy()
        mask = parsed[LOSS_MASK_KEY].flat_values.numpy().astype(bool)
        found = np.bincount(ids[mask])
        size = max(len(counts), len(found))
        counts = np.pad(counts, (0, size - len(counts))) + np.pad(found, (0, size - len(found)))
    return counts


def reply_bits(client: ModelClient, conversations: Sequence[Conversation]) -> BitsPerByteResult:
    """One model's cost of the replies of `conversations`, through its own template."""
    scores = client.score_replies(conversations)
    return BitsPerByteResult(
        float(scores.nll_sum.sum()), int(scores.num_tokens.sum()), int(max(scores.reply_bytes.sum(), 1))
    )


def measure_reply_quality(
    models: Dict[str, str],
    eval_files: Sequence[str],
    train_token_files: Sequence[str],
    eval_token_files: Sequence[str],
    feature_spec,
    batch_size: int,
    max_conversations: int,
) -> Tuple[PerplexityResult, Dict[str, BitsPerByteResult], Optional[UnigramReference]]:
    """(candidate's reply perplexity, {model name: bits per reply byte}, the unigram reference)
    for `models` ({"candidate": dir, "baseline": dir}); see the module docstring."""
    conversations = read_conversations(eval_files, max_conversations)
    if not conversations:
        raise ValueError(f"no conversations in the eval split {list(eval_files)}")
    bits: Dict[str, BitsPerByteResult] = {}
    for name, directory in models.items():
        client = ModelClient(directory, batch_size, required=signatures.CHAT_SIGNATURES)
        bits[name] = reply_bits(client, conversations)
    candidate = bits["candidate"]
    mean_nll = candidate.nll_sum / candidate.num_tokens if candidate.num_tokens else math.nan
    perplexity = PerplexityResult(
        math.exp(mean_nll) if math.isfinite(mean_nll) else math.nan, mean_nll, candidate.num_tokens
    )
    unigram = None
    if train_token_files:
        unigram = unigram_reference(
            reply_token_counts(train_token_files, feature_spec), reply_token_counts(eval_token_files, feature_spec)
        )
    return perplexity, bits, unigram
