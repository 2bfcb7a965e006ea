"""The one place the evaluator talks to an exported model: its serving signatures.

Everything else in the evaluator calls `ModelClient`, so it works with any export that has the
signatures of the serving contract (see `components/trainer/export.py`):

    generate      prompts [B] string, max_new_tokens int32, temperature float32, top_k int32,
                  [top_p float32 -- only in newer exports], seed int64
                  -> generations [B] string, num_generated_tokens [B] int32
    score         texts [B] string -> mean_nll [B] float32, num_tokens [B] int64
    score_tokens  blocks [B, L+1] int64 -> nll_sum [B], num_tokens [B]

`top_p` is passed only when the loaded `generate` signature declares it.
"""
from typing import List, NamedTuple, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the TF Text ops the exported tokenizer graph uses


class Scores(NamedTuple):
    """Per-text mean next-token NLL and the number of tokens it was averaged over."""

    mean_nll: np.ndarray
    num_tokens: np.ndarray

    @property
    def total_nll(self) -> np.ndarray:
        return self.mean_nll * self.num_tokens


class ModelClient:
    """Loads a SavedModel once and calls its signatures with plain Python values, in batches."""

    def __init__(self, saved_model_dir: str, batch_size: int = 64):
        if not tf.io.gfile.exists(saved_model_dir):
            raise FileNotFoundError(f"no SavedModel at {saved_model_dir}")
        self.path = saved_model_dir
        self.batch_size = batch_size
        self._model = tf.saved_model.load(saved_model_dir)
        signatures = self._model.signatures
        missing = {"generate", "score", "score_tokens"} - set(signatures.keys())
        if missing:
            raise ValueError(f"the SavedModel at {saved_model_dir} lacks the signature(s) {sorted(missing)}")
        self._generate = signatures["generate"]
        self._score = signatures["score"]
        self._score_tokens = signatures["score_tokens"]
        self.accepts_top_p = "top_p" in self._generate.structured_input_signature[1]

    @property
    def context_length(self) -> int:
        """The model's maximum context (tokens per packed eval block)."""
        return int(self._model.context_length.numpy())

    def _batches(self, items: Sequence[str]):
        for start in range(0, len(items), self.batch_size):
            yield list(items[start:start + self.batch_size])

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        temperature: float,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> List[str]:
        """Continuations of `prompts` (new text only), decoded from UTF-8 with replacement."""
        outputs: List[str] = []
        for index, batch in enumerate(self._batches(prompts)):
            arguments = dict(
                prompts=tf.constant(batch, tf.string),
                max_new_tokens=tf.constant(max_new_tokens, tf.int32),
                temperature=tf.constant(temperature, tf.float32),
                top_k=tf.constant(top_k, tf.int32),
                seed=tf.constant(seed + index, tf.int64),
            )
            if self.accepts_top_p:
                arguments["top_p"] = tf.constant(top_p, tf.float32)
            generations = self._generate(**arguments)["generations"].numpy()
            outputs += [text.decode("utf-8", "replace") for text in generations]
        return outputs

    def score(self, texts: Sequence[str]) -> Scores:
        """Mean NLL per text, each scored as one document by the model's `score` signature."""
        mean_nll, num_tokens = [], []
        for batch in self._batches(texts):
            result = self._score(texts=tf.constant(batch, tf.string))
            mean_nll.append(result["mean_nll"].numpy().astype(np.float64))
            num_tokens.append(result["num_tokens"].numpy().astype(np.int64))
        if not mean_nll:
            return Scores(np.zeros(0), np.zeros(0, np.int64))
        return Scores(np.concatenate(mean_nll), np.concatenate(num_tokens))

    def score_tokens(self, blocks: np.ndarray):
        """(summed NLL, token count) over a [B, L+1] int64 array of packed blocks."""
        result = self._score_tokens(blocks=tf.constant(blocks, tf.int64))
        return float(np.sum(result["nll_sum"].numpy())), int(np.sum(result["num_tokens"].numpy()))
