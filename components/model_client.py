"""The one client for calling an exported model in this process: its serving signatures.

The evaluator, `textgen generate`, the samples at the end of a run and the tests all call a
model through `ModelClient`, so they work with any export that has the signatures of the serving
contract (`components/trainer/serving/signatures.py`, the Trainer's product; what they compute:
`export.py` there). It lives beside the stages, not inside one, because several stages and the
CLI use it and none of them owns it. Arguments are built from that
contract (typed as the signature declares them), results come back as numpy arrays or text.

An input the loaded signature does not declare is left out (a model exported before the input
was added, e.g. `generate` without `top_p`, still answers).

A SavedModel is loaded once per process (`load_saved_model`): TensorFlow does not give a loaded
SavedModel's memory back when the Python object is gone (the 1.1B Llama export, 4.2 GB of
float32 variables: +5.4 GiB resident on load, the same after `del` and `gc.collect()`, +4.9 GiB
more on loading it again, with or without oneDNN), so every further load of the same model was
a full copy more. The Evaluator's quality, safety, bias and baseline steps load the candidate
and the baseline several times; at 1.1B that ran out of 24 GiB.
"""

import threading
from typing import Any, Dict, List, NamedTuple, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the TF Text ops the exported tokenizer graph uses

from components.trainer.serving import signatures

REQUIRED_SIGNATURES = (signatures.GENERATE, signatures.SCORE, signatures.SCORE_TOKENS)


_LOADED: Dict[Tuple[str, int, int], Any] = {}
_LOADING = threading.Lock()


def load_saved_model(path: str):
    """The SavedModel at `path`, loaded on the first call and the same object after that while
    its `saved_model.pb` is unchanged (size and modification time: an export rewritten in place
    is loaded anew)."""
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"no SavedModel at {path}")
    graph_file = tf.io.gfile.join(path, "saved_model.pb")
    stat = tf.io.gfile.stat(graph_file) if tf.io.gfile.exists(graph_file) else None
    key = (path, stat.length if stat else -1, stat.mtime_nsec if stat else -1)
    with _LOADING:
        if key not in _LOADED:
            _LOADED[key] = tf.saved_model.load(path)
        return _LOADED[key]


class Scores(NamedTuple):
    """Per-text mean next-token NLL and the number of tokens it was averaged over."""

    mean_nll: np.ndarray
    num_tokens: np.ndarray

    @property
    def total_nll(self) -> np.ndarray:
        return self.mean_nll * self.num_tokens


class ContinuationScores(NamedTuple):
    """Per-row summed NLL of a continuation after its prefix, its token count, and whether the
    prefix was cut to fit the context."""

    nll_sum: np.ndarray
    num_tokens: np.ndarray
    truncated: np.ndarray

    @property
    def mean_nll(self) -> np.ndarray:
        """NLL per continuation token (NaN for an empty continuation)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.num_tokens > 0, self.nll_sum / np.maximum(self.num_tokens, 1), np.nan)


class ChatReply(NamedTuple):
    """A generated reply: its text, tokens, and whether it ended with a stop token within the limit."""

    text: str
    num_tokens: int
    stopped: bool


class ReplyScores(NamedTuple):
    """Per conversation: summed NLL (nats) and count of its reply tokens, the replies' UTF-8
    bytes, and whether it was cut to fit the context."""

    nll_sum: np.ndarray
    num_tokens: np.ndarray
    reply_bytes: np.ndarray
    truncated: np.ndarray


class ModelClient:
    """Loads a SavedModel once (or wraps a loaded one) and calls its signatures with plain Python
    values, `batch_size` texts per call.

    `required` names the signatures the caller needs; a model without one of them is refused here
    rather than at the first call.
    """

    def __init__(
        self, saved_model: Union[str, Any], batch_size: int = 64, required: Sequence[str] = REQUIRED_SIGNATURES
    ):
        if isinstance(saved_model, str):
            self.path = saved_model
            self._model = load_saved_model(saved_model)
        else:
            self.path = ""
            self._model = saved_model
        self.batch_size = batch_size
        missing = set(required) - set(self._model.signatures.keys())
        if missing:
            where = f" at {self.path}" if self.path else ""
            raise ValueError(f"the SavedModel{where} lacks the signature(s) {sorted(missing)}")

    @property
    def context_length(self) -> int:
        """The model's maximum context (tokens per packed eval block)."""
        return int(self._model.context_length.numpy())

    def call(self, signature: str, **values: Any) -> Dict[str, np.ndarray]:
        """One call of `signature` with every input of the contract; its outputs as numpy arrays."""
        function = self._model.signatures[signature]
        accepted = function.structured_input_signature[1].keys()
        arguments = signatures.typed_inputs(signature, values, accepted)
        outputs = function(**{key: tf.constant(value) for key, value in arguments.items()})
        return {key: value.numpy() for key, value in outputs.items()}

    def _batches(self, items: Sequence):
        for start in range(0, len(items), self.batch_size):
            yield list(items[start : start + self.batch_size])

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int,
        temperature: float,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> List[str]:
        """Continuations of `prompts` (new text only), decoded from UTF-8 with replacement.

        The n-th batch is sampled with `seed + n`, so one seed gives the same texts on every run.
        """
        outputs: List[str] = []
        for index, batch in enumerate(self._batches(prompts)):
            result = self.call(
                signatures.GENERATE,
                prompts=batch,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=seed + index,
            )
            outputs += signatures.decode_texts(result["generations"])
        return outputs

    def score(self, texts: Sequence[str]) -> Scores:
        """Mean NLL per text, each scored as one document by the model's `score` signature."""
        mean_nll, num_tokens = [], []
        for batch in self._batches(texts):
            result = self.call(signatures.SCORE, texts=batch)
            mean_nll.append(result["mean_nll"].astype(np.float64))
            num_tokens.append(result["num_tokens"].astype(np.int64))
        if not mean_nll:
            return Scores(np.zeros(0), np.zeros(0, np.int64))
        return Scores(np.concatenate(mean_nll), np.concatenate(num_tokens))

    def score_continuation(self, prefixes: Sequence[str], continuations: Sequence[str]) -> ContinuationScores:
        """NLL of each continuation's tokens after its prefix (`score_continuation` signature)."""
        if len(prefixes) != len(continuations):
            raise ValueError(f"{len(prefixes)} prefixes but {len(continuations)} continuations")
        parts: Dict[str, List[np.ndarray]] = {"nll_sum": [], "num_tokens": [], "truncated": []}
        rows = list(zip(prefixes, continuations))
        if not rows:
            return ContinuationScores(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, bool))
        # Batched by length (a batch is padded to its longest row), answered in the caller's order.
        order = np.argsort([len(p) + len(c) for p, c in rows], kind="stable")
        for batch in self._batches([rows[i] for i in order]):
            result = self.call(
                signatures.SCORE_CONTINUATION, prefixes=[p for p, _ in batch], continuations=[c for _, c in batch]
            )
            for key in parts:
                parts[key].append(result[key])
        restore = np.argsort(order, kind="stable")
        return ContinuationScores(
            np.concatenate(parts["nll_sum"]).astype(np.float64)[restore],
            np.concatenate(parts["num_tokens"]).astype(np.int64)[restore],
            np.concatenate(parts["truncated"]).astype(bool)[restore],
        )

    @property
    def has_chat(self) -> bool:
        """Whether the model answers conversations (its tokenizer carries a chat template)."""
        return all(name in self._model.signatures for name in signatures.CHAT_SIGNATURES)

    @staticmethod
    def _conversation_matrix(conversations: Sequence[Sequence[Tuple[str, str]]]) -> Tuple[list, list]:
        """(roles, contents) [batch, turns] lists, "" padding after each conversation's last turn."""
        width = max((len(c) for c in conversations), default=0)
        roles = [[role for role, _ in c] + [""] * (width - len(c)) for c in conversations]
        contents = [[content for _, content in c] + [""] * (width - len(c)) for c in conversations]
        return roles, contents

    def chat(
        self,
        conversations: Sequence[Sequence[Tuple[str, str]]],
        max_new_tokens: int,
        temperature: float,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> List[ChatReply]:
        """The assistant's reply to each conversation ((role, content) turns) through the model's
        own chat template (`chat` signature); the n-th batch is sampled with `seed + n`. Raises
        ValueError for a conversation the template refuses (as the template itself would)."""
        replies: List[ChatReply] = []
        for index, batch in enumerate(self._batches(conversations)):
            roles, contents = self._conversation_matrix(batch)
            result = self.call(
                signatures.CHAT,
                roles=roles,
                contents=contents,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=seed + index,
            )
            # (a model exported before the `accepted` output answers every row)
            refused = [row for row, accepted in enumerate(result.get("accepted", [True] * len(batch))) if not accepted]
            if refused:
                number = index * self.batch_size + refused[0]
                raise ValueError(
                    f"the model's chat template refuses conversation {number} of the batch (roles "
                    f"{', '.join(role for role, _ in conversations[number])})"
                )
            replies += [
                ChatReply(text, int(count), bool(stopped))
                for text, count, stopped in zip(
                    signatures.decode_texts(result["generations"]), result["num_generated_tokens"], result["stopped"]
                )
            ]
        return replies

    def score_replies(self, conversations: Sequence[Sequence[Tuple[str, str]]]) -> ReplyScores:
        """NLL of each conversation's assistant turns given the rest (`score_replies` signature)."""
        parts: Dict[str, List[np.ndarray]] = {"nll_sum": [], "num_tokens": [], "reply_bytes": [], "truncated": []}
        for batch in self._batches(conversations):
            roles, contents = self._conversation_matrix(batch)
            result = self.call(signatures.SCORE_REPLIES, roles=roles, contents=contents)
            for key in parts:
                parts[key].append(result[key])
        if not parts["nll_sum"]:
            return ReplyScores(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool))
        return ReplyScores(
            np.concatenate(parts["nll_sum"]).astype(np.float64),
            np.concatenate(parts["num_tokens"]).astype(np.int64),
            np.concatenate(parts["reply_bytes"]).astype(np.int64),
            np.concatenate(parts["truncated"]).astype(bool),
        )

    def score_tokens(self, blocks: np.ndarray):
        """(summed NLL, token count) over a [B, L+1] int64 array of packed blocks."""
        result = self.call(signatures.SCORE_TOKENS, blocks=blocks)
        return float(np.sum(result["nll_sum"])), int(np.sum(result["num_tokens"]))
