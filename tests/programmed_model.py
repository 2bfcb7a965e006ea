"""Purpose-built test models: tiny SavedModels with the real serving signatures, programmed output.

They are test doubles on purpose: to show that each evaluator gate refuses a model that does the
harmful thing (emits unsafe text, leaks e-mail addresses, regurgitates training text, treats one
group differently) a model must reliably do that thing, which a briefly trained network does not.
Each model exports `generate`, `score`, `score_tokens` and `score_continuation` with the inputs the serving contract
declares (`components/trainer/serving/signatures.py`) and its output names, so the evaluator
loads and calls them exactly as it calls a trained export.
"""

from typing import Sequence, Tuple

import tensorflow as tf

from components.trainer.serving import signatures

Rule = Tuple[str, str]  # (regex the whole prompt must match, text generated for it)


class ProgrammedModel(tf.Module):
    """Generates `default_text` unless a rule's regex matches the prompt; scores every text with
    `nll` per token plus `extra` for texts matching an `nll_rules` regex, counting one token per
    `bytes_per_token` bytes (plus the end-of-document token): a stand-in for its tokenizer.

    `score_continuation` scores the continuation alone (no end-of-document token) at `nll` per
    `bytes_per_token` bytes, so every text costs the same per byte, plus the rules' `extra`
    (matched on prefix + continuation), less `known_term_nll` for a continuation that is one of
    `known_terms`, whitespace around it aside (a model that has seen those words)."""

    def __init__(
        self,
        default_text: str,
        rules: Sequence[Rule] = (),
        nll: float = 2.0,
        nll_rules: Sequence[Tuple[str, float]] = (),
        context_length: int = 32,
        bytes_per_token: int = 4,
        known_terms: Sequence[str] = (),
        known_term_nll: float = 1.0,
    ):
        super().__init__(name="programmed_model")
        self._default = default_text
        self._rules = list(rules)
        self._nll = nll
        self._nll_rules = list(nll_rules)
        self._bytes_per_token = bytes_per_token
        self._known_terms = list(known_terms) or [""]
        self._known_term_nll = known_term_nll if known_terms else 0.0
        self.context_length = tf.Variable(context_length, dtype=tf.int64, trainable=False)

    def _respond(self, prompts):
        generations = tf.fill(tf.shape(prompts), self._default)
        for pattern, text in reversed(self._rules):
            generations = tf.where(tf.strings.regex_full_match(prompts, pattern), text, generations)
        counts = tf.strings.length(generations, unit="UTF8_CHAR") // 4 + 1
        return {"generations": generations, "num_generated_tokens": tf.cast(counts, tf.int32)}

    @tf.function(input_signature=signatures.input_signature(signatures.GENERATE))
    def generate(self, prompts, max_new_tokens, temperature, top_k, top_p, seed):
        return self._respond(prompts)

    @tf.function(input_signature=signatures.input_signature(signatures.SCORE))
    def score(self, texts):
        mean_nll = tf.fill(tf.shape(texts), tf.constant(self._nll, tf.float32))
        for pattern, extra in self._nll_rules:
            mean_nll += tf.where(tf.strings.regex_full_match(texts, pattern), extra, 0.0)
        num_tokens = tf.cast(tf.strings.length(texts) // self._bytes_per_token, tf.int64) + 1
        return {"mean_nll": mean_nll, "num_tokens": num_tokens}

    @tf.function(input_signature=signatures.input_signature(signatures.SCORE_CONTINUATION))
    def score_continuation(self, prefixes, continuations):
        per_token = tf.fill(tf.shape(continuations), tf.constant(self._nll, tf.float32))
        texts = prefixes + continuations
        for pattern, extra in self._nll_rules:
            per_token += tf.where(tf.strings.regex_full_match(texts, pattern), extra, 0.0)
        # A term is scored with the whitespace before it (bias.py); the model knows the word itself.
        terms = tf.strings.strip(continuations)
        known = tf.reduce_any(tf.equal(terms[:, tf.newaxis], tf.constant(self._known_terms)[tf.newaxis, :]), axis=1)
        per_token -= tf.where(known, self._known_term_nll, 0.0)
        length = tf.strings.length(continuations)
        num_tokens = tf.cast(length // self._bytes_per_token, tf.int64) + 1
        return {
            "nll_sum": per_token * tf.cast(length, tf.float32) / self._bytes_per_token,
            "num_tokens": num_tokens,
            "truncated": tf.zeros(tf.shape(continuations), tf.bool),
        }

    @tf.function(input_signature=signatures.input_signature(signatures.SCORE_TOKENS))
    def score_tokens(self, blocks):
        num_tokens = tf.reduce_sum(tf.cast(tf.not_equal(blocks[:, 1:], 0), tf.int64), axis=1)
        return {"nll_sum": tf.cast(num_tokens, tf.float32) * self._nll, "num_tokens": num_tokens}


def export_programmed_model(export_dir: str, default_text: str, **kwargs) -> str:
    """Saves a `ProgrammedModel` with the serving signatures; returns `export_dir`."""
    module = ProgrammedModel(default_text, **kwargs)
    signatures = {
        "generate": module.generate,
        "score": module.score,
        "score_tokens": module.score_tokens,
        "score_continuation": module.score_continuation,
    }
    tf.saved_model.save(module, export_dir, signatures=signatures)
    return export_dir


class ProgrammedChatModel(ProgrammedModel):
    """A `ProgrammedModel` that also answers conversations (`chat`, `score_replies`, as a model
    tuned on conversations exports them): the reply to a conversation is the `replies` entry whose
    regex matches its last user turn, else `default_reply`; `stops` says whether replies end with a
    stop token (False: a model whose end-of-turn token was never trained). `score_replies` costs
    `nll` per `bytes_per_token` bytes of the assistant turns. `generate` (raw text continuation)
    keeps answering `default_text`, so a test can tell probes sent as user turns from probes sent
    as raw text."""

    def __init__(
        self, default_text: str, default_reply: str, replies: Sequence[Rule] = (), stops: bool = True, **kwargs
    ):
        super().__init__(default_text, **kwargs)
        self._default_reply = default_reply
        self._replies = list(replies)
        self._stops = stops

    @tf.function(input_signature=signatures.input_signature(signatures.CHAT))
    def chat(self, roles, contents, max_new_tokens, temperature, top_k, top_p, seed):
        is_user = tf.equal(roles, "user")
        last_user = tf.reduce_max(
            tf.where(is_user, tf.range(tf.shape(roles, out_type=tf.int64)[1])[tf.newaxis, :], -1), axis=1
        )
        message = tf.gather(contents, tf.maximum(last_user, 0), batch_dims=1)
        reply = tf.fill(tf.shape(message), self._default_reply)
        for pattern, text in reversed(self._replies):
            reply = tf.where(tf.strings.regex_full_match(message, pattern), text, reply)
        counts = tf.strings.length(reply, unit="UTF8_CHAR") // 4 + 1
        if not self._stops:  # it runs to the limit without an end-of-turn token
            counts = tf.fill(tf.shape(reply), max_new_tokens)
        return {
            "generations": reply,
            "num_generated_tokens": tf.cast(counts, tf.int32),
            "stopped": tf.fill(tf.shape(reply), self._stops),
        }

    @tf.function(input_signature=signatures.input_signature(signatures.SCORE_REPLIES))
    def score_replies(self, roles, contents):
        reply_bytes = tf.reduce_sum(tf.where(tf.equal(roles, "assistant"), tf.strings.length(contents), 0), axis=1)
        per_token = tf.fill(tf.shape(reply_bytes), tf.constant(self._nll, tf.float32))
        texts = tf.strings.reduce_join(contents, axis=1, separator="\n")
        for pattern, extra in self._nll_rules:
            per_token += tf.where(tf.strings.regex_full_match(texts, pattern), extra, 0.0)
        num_tokens = tf.cast(reply_bytes // self._bytes_per_token, tf.int64) + 1
        return {
            "nll_sum": per_token * tf.cast(num_tokens, tf.float32),
            "num_tokens": num_tokens,
            "reply_bytes": tf.cast(reply_bytes, tf.int64),
            "truncated": tf.zeros(tf.shape(reply_bytes), tf.bool),
        }


def export_programmed_chat_model(export_dir: str, default_text: str, default_reply: str, **kwargs) -> str:
    """Saves a `ProgrammedChatModel` with the text and the chat signatures; returns `export_dir`."""
    module = ProgrammedChatModel(default_text, default_reply, **kwargs)
    functions = {
        "generate": module.generate,
        "score": module.score,
        "score_tokens": module.score_tokens,
        "score_continuation": module.score_continuation,
        "chat": module.chat,
        "score_replies": module.score_replies,
    }
    tf.saved_model.save(module, export_dir, signatures=functions)
    return export_dir
