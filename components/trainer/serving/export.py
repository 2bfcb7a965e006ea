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
from components.trainer.training.data import frame_documents
from components.trainer.model import decoding
from components.trainer.serving import predict_requests, signatures
from components.trainer.serving.weights import serving_backbone
from components.transform.preprocessing import RAW_TEXT_KEY, TOKEN_IDS_KEY
from components.trainer.options import GenerationOptions


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
        else:
            self.tokenizer_files = [tf.saved_model.Asset(path) for path in tokenizer.file_paths(tokenizer_dir)]
        self._special = tokenizer.special
        # score_tokens masks padding only where the pad id cannot be a real target (GPT-2 pads
        # with its <|endoftext|>, which packed blocks contain as the document separator).
        framing = set(tokenizer.special.document_prefix) | set(tokenizer.special.document_suffix) | {tokenizer.special.eos_id}
        self._mask_padding = tokenizer.special.pad_id not in framing
        self._detokenizer = tokenizer.graph(name="detokenizer")
        self.context_length = tf.Variable(backbone.context_length, dtype=tf.int64, trainable=False, name="context_length")
        self._defaults = generation

    def _tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        transformed = self.transform_layer({RAW_TEXT_KEY: tf.reshape(texts, [-1, 1])})
        return tf.cast(transformed[TOKEN_IDS_KEY], tf.int64)

    @tf.function(input_signature=signatures.input_signature(signatures.GENERATE))
    def generate(self, prompts, max_new_tokens, temperature, top_k, top_p, seed):
        """Continues each prompt; see the module docstring."""
        new_ids, counts = decoding.generate_tokens(
            self.backbone, self._tokenize(prompts), max_new_tokens, temperature, top_k, top_p, seed,
            jit_compile=self._defaults.jit_compile, special=self._special,
        )
        return {"generations": self._detokenizer.detokenize(new_ids), "num_generated_tokens": counts}

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
        return {"nll_sum": tf.reduce_sum(nll, axis=1), "num_tokens": tf.reduce_sum(tf.cast(mask, tf.int64), axis=1),
                "truncated": first > 0}

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
    tf.saved_model.save(module, export_dir, signatures=functions)
    predict_requests.write_warmup_file(export_dir, predict_requests.warmup_requests(generation))
