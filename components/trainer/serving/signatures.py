"""The serving contract: every signature of the exported model, its inputs and its outputs.

One description, read by the three places that must agree on it: the export declares its
`tf.function` input signatures from it (`export.py`), the client that calls a loaded model builds
its arguments from it (`components/model_client.py`), and the TF Serving request builders build their protos and
REST bodies from it (`predict_requests.py`).

    serving_default  prompts [batch] string -> generations [batch] string, num_generated_tokens [batch] int32
    generate         prompts [batch] string, max_new_tokens int32, temperature float32, top_k int32,
                     top_p float32, seed int64 (all scalars) -> same outputs as serving_default
    score            texts [batch] string -> mean_nll [batch] float32, num_tokens [batch] int64
    score_tokens     blocks [batch, context_length + 1] int64 -> nll_sum [batch], num_tokens [batch]
    score_continuation
                     prefixes [batch] string, continuations [batch] string -> nll_sum [batch] float32,
                     num_tokens [batch] int64, truncated [batch] bool
  models trained on conversations (a chat template in their tokenizer) also have:
    chat             roles [batch, turns] string, contents [batch, turns] string (an empty role
                     marks padding after the last turn), then generate's five sampling scalars
                     -> generations [batch] string (the reply), num_generated_tokens [batch] int32,
                     stopped [batch] bool (the reply ended with a stop token within the limit),
                     accepted [batch] bool (false: the template refuses the conversation; no reply)
    score_replies    roles, contents -> nll_sum [batch] float32 and num_tokens [batch] int64 of
                     the assistant turns' tokens, reply_bytes [batch] int64, truncated [batch] bool

What each signature computes is documented in `export.py`.
"""

from typing import Any, Collection, Dict, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

SERVING_DEFAULT = "serving_default"
GENERATE = "generate"
SCORE = "score"
SCORE_TOKENS = "score_tokens"
SCORE_CONTINUATION = "score_continuation"
CHAT = "chat"
SCORE_REPLIES = "score_replies"
CHAT_SIGNATURES = (CHAT, SCORE_REPLIES)


class Input(NamedTuple):
    """One input of a signature: () is a scalar, (None,) one value per row, (None, None) a matrix."""

    name: str
    dtype: tf.DType
    shape: Tuple[Optional[int], ...]


_PROMPTS = Input("prompts", tf.string, (None,))
_CONVERSATION = (Input("roles", tf.string, (None, None)), Input("contents", tf.string, (None, None)))
_SAMPLING = (
    Input("max_new_tokens", tf.int32, ()),
    Input("temperature", tf.float32, ()),
    Input("top_k", tf.int32, ()),
    Input("top_p", tf.float32, ()),
    Input("seed", tf.int64, ()),
)

INPUTS: Dict[str, Tuple[Input, ...]] = {
    SERVING_DEFAULT: (_PROMPTS,),
    GENERATE: (_PROMPTS, *_SAMPLING),
    CHAT: (*_CONVERSATION, *_SAMPLING),
    SCORE_REPLIES: _CONVERSATION,
    SCORE: (Input("texts", tf.string, (None,)),),
    SCORE_TOKENS: (Input("blocks", tf.int64, (None, None)),),
    SCORE_CONTINUATION: (Input("prefixes", tf.string, (None,)), Input("continuations", tf.string, (None,))),
}

OUTPUTS: Dict[str, Tuple[str, ...]] = {
    SERVING_DEFAULT: ("generations", "num_generated_tokens"),
    GENERATE: ("generations", "num_generated_tokens"),
    SCORE: ("mean_nll", "num_tokens"),
    SCORE_TOKENS: ("nll_sum", "num_tokens"),
    SCORE_CONTINUATION: ("nll_sum", "num_tokens", "truncated"),
    CHAT: ("generations", "num_generated_tokens", "stopped", "accepted"),
    SCORE_REPLIES: ("nll_sum", "num_tokens", "reply_bytes", "truncated"),
}


def _inputs(signature: str) -> Tuple[Input, ...]:
    if signature not in INPUTS:
        raise ValueError(f"unknown signature {signature!r}; the export has {sorted(INPUTS)}")
    return INPUTS[signature]


def input_signature(signature: str) -> List[tf.TensorSpec]:
    """The `tf.function` input signature of `signature`, in the order of its arguments."""
    return [tf.TensorSpec(spec.shape, spec.dtype, name=spec.name) for spec in _inputs(signature)]


def _encoded(value: Any) -> Any:
    """Strings (in nested lists too, for [batch, turns] inputs) as UTF-8 bytes."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (list, tuple)):
        return [_encoded(item) for item in value]
    return value


def _typed(spec: Input, value: Any) -> np.ndarray:
    if spec.dtype == tf.string:
        value = [value] if isinstance(value, (str, bytes)) else value
        array = np.array(_encoded(value), dtype=object)
    else:
        array = np.asarray(value, dtype=spec.dtype.as_numpy_dtype)
    if array.ndim != len(spec.shape):
        raise ValueError(
            f"input {spec.name!r} must have rank {len(spec.shape)} (shape {spec.shape}), not {array.shape}"
        )
    return array


def typed_inputs(
    signature: str, values: Mapping[str, Any], accepted: Optional[Collection[str]] = None
) -> Dict[str, np.ndarray]:
    """`values` as numpy arrays of the dtypes and ranks `signature` declares (text is UTF-8 encoded).

    Every input must be given and no other. `accepted`, when given, is the set of input names the
    loaded model's signature really has: inputs it lacks are left out (a model exported before an
    input was added to the contract still answers, with that input at its default).
    """
    specs = _inputs(signature)
    unknown = set(values) - {spec.name for spec in specs}
    missing = [spec.name for spec in specs if spec.name not in values]
    if unknown or missing:
        raise ValueError(
            f"signature {signature!r} takes {[spec.name for spec in specs]}; "
            f"missing {missing}, unknown {sorted(unknown)}"
        )
    return {spec.name: _typed(spec, values[spec.name]) for spec in specs if accepted is None or spec.name in accepted}


def decode_texts(values) -> List[str]:
    """A string output (`generations`) as Python text, invalid UTF-8 replaced."""
    return [
        text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
        for text in np.asarray(values).tolist()
    ]
