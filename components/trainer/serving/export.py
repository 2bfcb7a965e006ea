"""The serving export: a SavedModel that takes raw strings and needs no Python to call.

Signatures (their inputs and outputs are declared once, in `signatures.py`; TF Serving can carry
all of them):
    serving_default  `generate` with the generation defaults from config
    generate         continues each prompt, framed as the tokenizer frames a text (nothing added
                     for GPT-2, <s> for Llama, [EOS] for the learned tokenizer; special.py);
                     greedy when temperature == 0; decoded with the key/value cache
                     (see model/decoding.py)
    score            each text is scored as one whole document, framed as in training (EOS + text
                     + EOS for the learned tokenizer; a checkpoint's document prefix + text + its
                     end): every text token is predicted, which bits per byte needs; a text
                     longer than the context is scored in consecutive windows of context_length
                     tokens
    score_tokens     summed NLL and token count of packed [batch, context_length + 1] blocks;
                     what the evaluator uses on packed eval blocks
    score_continuation
                     summed NLL of a continuation's tokens after its prefix, the prefix framed as
                     a prompt (`generate`'s framing; nothing else scored); what the bias gate
                     compares

The tokenizer is the TF Transform graph itself (`transform_features_layer`, which embeds the
SentencePiece model), saved inside the model, so the served model tokenizes exactly as Transform
did; the detokenizer embeds the same model. The model file is also an asset of the export
(`assets/sentencepiece.model`): the registry records its sha256, warm start compares it, and the
Tokenizer stage reuses it (`tokenizer.policy=reuse`). A checkpoint's tokenizer (loaded.py) travels
the same way as its own files plus `special_tokens.json`; its special ids (`SpecialTokens`) frame
the documents, stop decoding and pad.

The exported backbone is a serving copy of the trained one (`weights.serving_backbone`):
the output projection is pre-transposed, and with `generation.weight_quantization=int8` every
matmul weight is int8 with per-channel scales.

`generation.jit_compile` compiles the decoding loop with XLA inside the SavedModel; stock TF
Serving on CPU then needs `--xla_cpu_compilation_enabled=true`. The default export has no XLA
and loads in stock TF Serving. Warm-up requests are written to
`assets.extra/tf_serving_warmup_requests`.
"""

import os

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the TF Text ops the transform graph's tokenizer uses)
import tensorflow_transform as tft

from components.tokenizer import loaded, model_file
from components.tokenizer.chat_graph import ChatGraph
from components.trainer.model import decoding
from components.trainer.model.framing import frame_documents
from components.trainer.options import GenerationOptions
from components.trainer.serving import predict_requests, signatures
from components.trainer.serving.weights import serving_backbone
from components.transform.preprocessing import RAW_TEXT_KEY, TOKEN_IDS_KEY


def _masked_token_nll(backbone, inputs: tf.Tensor, targets: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """Per-position negative log-likelihood of `targets`, zeroed where `mask` is False."""
    logits = backbone(inputs, training=False)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    return nll * tf.cast(mask, nll.dtype)


class TextGenerationModule(tf.Module):
    """Holds the backbone, the transform layer and the generation defaults; defines signatures."""

    def __init__(self, backbone, transform_output: tft.TFTransformOutput, generation: GenerationOptions):
        super().__init__(name="text_generation")
        self.backbone = backbone
        self.transform_layer = transform_output.transform_features_layer()
        tokenizer_dir = loaded.transform_graph_dir(os.path.dirname(transform_output.transform_savedmodel_dir))
        tokenizer = loaded.load(tokenizer_dir)
        if tokenizer.kind == loaded.LEARNED_SENTENCEPIECE:
            self.tokenizer_model = tf.saved_model.Asset(os.path.join(tokenizer_dir, model_file.MODEL_FILE_NAME))
            self.tokenizer_files = [
                tf.saved_model.Asset(path)
                for path in tokenizer.file_paths(tokenizer_dir)
                if os.path.basename(path) != model_file.MODEL_FILE_NAME
            ]  # a chat template's
        else:
            self.tokenizer_files = [tf.saved_model.Asset(path) for path in tokenizer.file_paths(tokenizer_dir)]
        self._special = tokenizer.special
        # score_tokens masks padding only where the pad id cannot be a real target (GPT-2 pads
        # with its <|endoftext|>, which packed blocks contain as the document separator).
        framing = (
            set(tokenizer.special.document_prefix) | set(tokenizer.special.document_suffix) | {tokenizer.special.eos_id}
        )
        self._mask_padding = tokenizer.special.pad_id not in framing
        self._detokenizer = tokenizer.graph(name="detokenizer")
        chat_spec = tokenizer.chat()  # not kept on the module: only tensors belong in the SavedModel
        self.has_chat = chat_spec is not None
        if self.has_chat:  # a conversation model: its transform graph takes roles/contents, not text
            self._text_tokenizer = tokenizer.graph(name="tokenizer")
            self._chat = ChatGraph(chat_spec.grammar, chat_spec.special_ids, self._text_tokenizer.tokenize)
        self._stop_ids = tuple(chat_spec.stop_token_ids) if self.has_chat else ()
        self.context_length = tf.Variable(
            backbone.context_length, dtype=tf.int64, trainable=False, name="context_length"
        )
        self._defaults = generation

    def _tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        if self.has_chat:
            return tf.cast(self._text_tokenizer.tokenize(tf.reshape(texts, [-1])), tf.int64)
        transformed = self.transform_layer({RAW_TEXT_KEY: tf.reshape(texts, [-1, 1])})
        return tf.cast(transformed[TOKEN_IDS_KEY], tf.int64)

    @tf.function(input_signature=signatures.input_signature(signatures.GENERATE))
    def generate(self, prompts, max_new_tokens, temperature, top_k, top_p, seed):
        """Continues each prompt; see the module docstring."""
        new_ids, counts = decoding.generate_tokens(
            self.backbone,
            self._tokenize(prompts),
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            seed,
            jit_compile=self._defaults.jit_compile,
            special=self._special,
            stop_ids=self._stop_ids,
        )
        return {"generations": self._detokenizer.detokenize(new_ids), "num_generated_tokens": counts}

    def chat(self, roles, contents, max_new_tokens, temperature, top_k, top_p, seed):
        """The assistant's reply to each conversation: rendered with the chat template in the graph
        (the generation prompt after its turns), continued, stopped at the template's end-of-turn
        token or the end of text. `stopped` tells a reply that ended so from one cut by the limit.
        A conversation the template refuses (an unknown role, an order of roles it does not
        accept; Jinja would raise) gets `accepted` false and no reply."""
        rendered = self._chat.generation_prompt(roles, contents)
        prompt, accepted = rendered.token_ids, rendered.accepted
        unframed = self._special._replace(prompt_prefix=(), prompt_suffix=())  # the template frames the conversation
        new_ids, counts = decoding.generate_tokens(
            self.backbone,
            prompt,
            max_new_tokens,
            temperature,
            top_k,
            top_p,
            seed,
            jit_compile=self._defaults.jit_compile,
            special=unframed,
            stop_ids=self._stop_ids,
        )
        stops = tf.constant(sorted({*self._stop_ids, self._special.eos_id}), tf.int64)
        ended = tf.reduce_any(tf.equal(_last_or(new_ids, -1)[:, tf.newaxis], stops[tf.newaxis, :]), axis=1)
        return {
            "generations": tf.where(accepted, self._detokenizer.detokenize(new_ids), ""),
            "num_generated_tokens": tf.where(accepted, counts, 0),
            "stopped": ended & accepted,
            "accepted": accepted,
        }

    def score_replies(self, roles, contents):
        """Summed NLL and count of the assistant turns' tokens (the loss mask Transform trains on),
        each conversation rendered with its template; and the replies' UTF-8 bytes (for bits per
        byte). A conversation longer than the context keeps its first context_length + 1 tokens
        and is marked `truncated`."""
        token_ids, mask, _ = self._chat.training_example(roles, contents)
        limit = tf.cast(self.backbone.context_length, tf.int64) + 1
        truncated = token_ids.row_lengths() > limit
        token_ids, mask = token_ids[:, :limit], mask[:, :limit]
        pad_id = self._special.pad_id
        dense = token_ids.to_tensor(default_value=pad_id)
        weights = tf.cast(mask.to_tensor(default_value=0), tf.bool)[:, 1:]
        nll = _masked_token_nll(self.backbone, dense[:, :-1], dense[:, 1:], weights)
        replies = tf.where(tf.equal(roles, "assistant"), tf.strings.length(contents), 0)
        return {
            "nll_sum": tf.reduce_sum(nll, axis=1),
            "num_tokens": tf.reduce_sum(tf.cast(weights, tf.int64), axis=1),
            "reply_bytes": tf.cast(tf.reduce_sum(replies, axis=1), tf.int64),
            "truncated": truncated,
        }

    @tf.function(input_signature=signatures.input_signature(signatures.SERVING_DEFAULT))
    def generate_with_defaults(self, prompts):
        """`generate` with the configured defaults; exported as serving_default."""
        return self.generate(
            prompts,
            tf.constant(self._defaults.max_new_tokens, tf.int32),
            tf.constant(self._defaults.temperature, tf.float32),
            tf.constant(self._defaults.top_k, tf.int32),
            tf.constant(self._defaults.top_p, tf.float32),
            tf.constant(0, tf.int64),
        )

    @tf.function(input_signature=signatures.input_signature(signatures.SCORE))
    def score(self, texts):
        """Mean next-token NLL of each text as one whole document (EOS + text + EOS, every token
        after the first predicted). A document with more predictions than the context is scored
        in consecutive windows of `context_length` predictions, each seeing only its own tokens
        (as packed training blocks do), so no part of the text is left out."""
        token_ids = self._tokenize(texts)
        ending = self._special.document_suffix or (self._special.eos_id,)
        documents = frame_documents(token_ids, self._special._replace(document_suffix=ending))
        inputs, targets = documents[:, :-1], documents[:, 1:]
        num_tokens = inputs.row_lengths()
        window = tf.cast(self.backbone.context_length, tf.int64)
        windows_per_text = (num_tokens + window - 1) // window
        first_window = tf.cumsum(windows_per_text, exclusive=True)
        window_of_token = (tf.ragged.range(num_tokens) // window + first_window[:, tf.newaxis]).flat_values
        num_windows = tf.reduce_sum(windows_per_text)
        window_inputs = tf.RaggedTensor.from_value_rowids(inputs.flat_values, window_of_token, nrows=num_windows)
        window_targets = tf.RaggedTensor.from_value_rowids(targets.flat_values, window_of_token, nrows=num_windows)
        pad_id = self._special.pad_id
        dense_inputs = window_inputs.to_tensor(default_value=pad_id)
        mask = tf.sequence_mask(window_inputs.row_lengths(), tf.shape(dense_inputs, out_type=tf.int64)[1])
        nll = _masked_token_nll(self.backbone, dense_inputs, window_targets.to_tensor(default_value=pad_id), mask)
        text_of_window = tf.repeat(tf.range(token_ids.nrows()), windows_per_text)
        text_nll = tf.math.unsorted_segment_sum(tf.reduce_sum(nll, axis=1), text_of_window, token_ids.nrows())
        return {"mean_nll": text_nll / tf.cast(num_tokens, text_nll.dtype), "num_tokens": num_tokens}

    @tf.function(input_signature=signatures.input_signature(signatures.SCORE_CONTINUATION))
    def score_continuation(self, prefixes, continuations):
        """Summed NLL and count of each continuation's tokens, predicted after its prefix framed as
        a prompt is (the tokenizer's prompt prefix + the prefix, or the bos id where both are empty).

        Prefix and continuation are tokenized separately, so one continuation has the same tokens
        after every prefix (the bias gate compares one ending after different group terms, and
        scores a group term after the words before it). No closing EOS is scored. A text with more
        predictions than the context keeps its last `context_length` ones: the earliest prefix
        tokens are dropped and the row is marked `truncated`.
        """
        framed = decoding.prepare_context(self._tokenize(prefixes), None, self._special._replace(prompt_suffix=()))
        continuation_ids = self._tokenize(continuations)
        documents = tf.concat([framed, continuation_ids], axis=1)
        predictions = documents.row_lengths() - 1
        first = tf.maximum(predictions - tf.cast(self.backbone.context_length, tf.int64), 0)
        positions = tf.ragged.range(first, predictions)  # input positions; each predicts the next token
        prefix_lengths = tf.repeat(framed.row_lengths() - 1, positions.row_lengths())
        scored = positions.with_flat_values(positions.flat_values >= prefix_lengths)  # target is a continuation token
        pad_id = self._special.pad_id
        inputs = tf.gather(documents, positions, batch_dims=1).to_tensor(default_value=pad_id)
        targets = tf.gather(documents, positions + 1, batch_dims=1).to_tensor(default_value=pad_id)
        mask = scored.to_tensor(default_value=False)
        nll = _masked_token_nll(self.backbone, inputs, targets, mask)
        return {
            "nll_sum": tf.reduce_sum(nll, axis=1),
            "num_tokens": tf.reduce_sum(tf.cast(mask, tf.int64), axis=1),
            "truncated": first > 0,
        }

    @tf.function(input_signature=signatures.input_signature(signatures.SCORE_TOKENS))
    def score_tokens(self, blocks):
        """Summed NLL and token count of each packed block (inputs = block[:-1], targets = block[1:])."""
        targets = blocks[:, 1:]
        if self._mask_padding:
            mask = tf.not_equal(targets, self._special.pad_id)
        else:
            mask = tf.ones_like(targets, tf.bool)
        nll = _masked_token_nll(self.backbone, blocks[:, :-1], targets, mask)
        return {"nll_sum": tf.reduce_sum(nll, axis=1), "num_tokens": tf.reduce_sum(tf.cast(mask, tf.int64), axis=1)}


def _last_or(ids: tf.RaggedTensor, default: int) -> tf.Tensor:
    """Each row's last id, or `default` for an empty row."""
    lengths = ids.row_lengths()
    padded = tf.cast(ids.to_tensor(default_value=default), tf.int64)
    padded = tf.concat([padded, tf.fill([tf.shape(padded)[0], 1], tf.constant(default, tf.int64))], axis=1)
    last = tf.gather(padded, tf.maximum(lengths - 1, 0), batch_dims=1)
    return tf.where(lengths > 0, last, tf.constant(default, tf.int64))


def export_serving_model(
    backbone, transform_output: tft.TFTransformOutput, generation: GenerationOptions, export_dir: str
) -> None:
    """Writes the SavedModel with the signatures described in the module docstring."""
    served = serving_backbone(backbone, generation.weight_quantization)
    module = TextGenerationModule(served, transform_output, generation)
    functions = {
        signatures.SERVING_DEFAULT: module.generate_with_defaults,
        signatures.GENERATE: module.generate,
        signatures.SCORE: module.score,
        signatures.SCORE_TOKENS: module.score_tokens,
        signatures.SCORE_CONTINUATION: module.score_continuation,
    }
    if module.has_chat:
        functions[signatures.CHAT] = tf.function(
            module.chat, input_signature=signatures.input_signature(signatures.CHAT)
        )
        functions[signatures.SCORE_REPLIES] = tf.function(
            module.score_replies, input_signature=signatures.input_signature(signatures.SCORE_REPLIES)
        )
    tf.saved_model.save(module, export_dir, signatures=functions)
    predict_requests.write_warmup_file(export_dir, predict_requests.warmup_requests(generation, chat=module.has_chat))
