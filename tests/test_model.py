"""The backbone, the packed input pipeline and the exported serving model."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from components.model_client import ModelClient
from components.tokenizer.ids import EOS_ID
from components.trainer.options import ModelOptions
from components.trainer.serving import signatures
from components.trainer.training import data
from tests.conftest import FIXTURE_VOCAB_SIZE as TINY_VOCAB
from tests.conftest import TINY_MODEL_KWARGS

TINY = ModelOptions(**TINY_MODEL_KWARGS)


@pytest.fixture(scope="module")
def backbone(tiny_backbone):
    return tiny_backbone


def test_forward_pass_shape(backbone):
    logits = backbone(tf.ones([3, 17], tf.int64))
    assert logits.shape == (3, 17, backbone.vocab_size)


def test_changing_a_future_token_never_changes_earlier_logits(backbone):
    rng = np.random.default_rng(0)
    vocab_size = backbone.vocab_size
    tokens = rng.integers(2, vocab_size, size=(2, TINY.context_length))
    for position in (1, 10, TINY.context_length - 1):
        changed = tokens.copy()
        changed[:, position] = (changed[:, position] + 7) % vocab_size
        before, after = backbone(tf.constant(tokens)), backbone(tf.constant(changed))
        np.testing.assert_allclose(before[:, :position].numpy(), after[:, :position].numpy(), atol=1e-5)
        assert not np.allclose(before[:, position:].numpy(), after[:, position:].numpy())


def test_packing_concatenates_documents_with_separators_and_shifts_targets(transform_artifacts):
    output_dir, examples, documents = transform_artifacts
    output = tft.TFTransformOutput(output_dir)
    spec = output.transformed_feature_spec()
    token_ids = output.transform_features_layer()({"text": tf.reshape(tf.constant(documents), [-1, 1])})["token_ids"]
    stream = []
    for ids in token_ids.to_list():
        stream += [EOS_ID] + ids
    block = 16
    batches = list(data.packed_blocks(examples, spec, context_length=block, batch_size=4))
    inputs = np.concatenate([x.numpy() for x, _ in batches])
    targets = np.concatenate([y.numpy() for _, y in batches])
    assert inputs.shape == targets.shape == (len(stream) // (block + 1), block)
    expected = np.array(stream[: inputs.shape[0] * (block + 1)]).reshape(-1, block + 1)
    np.testing.assert_array_equal(inputs, expected[:, :-1])  # nothing lost, duplicated or reordered
    np.testing.assert_array_equal(targets, expected[:, 1:])
    assert (inputs == EOS_ID).sum() > 1  # documents are separated inside blocks


def _generate(model, prompts, max_new_tokens=12, temperature=0.0, top_k=0, seed=0, top_p=1.0):
    """The `generate` signature's outputs (numpy), called through the serving client."""
    return ModelClient(model).call(
        signatures.GENERATE,
        prompts=prompts,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )


def test_export_has_the_serving_signatures(exported_model):
    model, export_dir = exported_model
    # A text model: every signature of the contract but the two of chat models.
    assert (
        set(model.signatures)
        == set(signatures.INPUTS) - set(signatures.CHAT_SIGNATURES)
        == {"serving_default", "generate", "score", "score_tokens", "score_continuation"}
    )
    assert os.path.exists(os.path.join(export_dir, "saved_model.pb"))
    outputs = ModelClient(model).call(signatures.SERVING_DEFAULT, prompts=["Hi Zoë,", "Thanks"])
    assert outputs["generations"].shape == (2,)
    counts = outputs["num_generated_tokens"]
    assert ((counts >= 1) & (counts <= 8)).all()  # the exported default is 8 new tokens (fewer if [EOS])


def test_greedy_generation_is_deterministic_and_batch_independent(exported_model):
    model, _ = exported_model
    prompts = ["a short one", "a considerably longer prompt than the other one"]
    batch = _generate(model, prompts)["generations"].tolist()
    alone = [_generate(model, [p])["generations"][0] for p in prompts]
    assert batch == alone
    assert batch == _generate(model, prompts)["generations"].tolist()


def test_generation_respects_the_token_limit_and_truncates_long_prompts(exported_model):
    model, _ = exported_model
    outputs = _generate(model, ["x" * 500], max_new_tokens=5)
    assert int(outputs["num_generated_tokens"][0]) <= 5
    assert outputs["generations"].shape == (1,)


def test_seeded_sampling_is_reproducible(exported_model):
    model, _ = exported_model
    first = _generate(model, ["Hello"], temperature=1.0, top_k=50, top_p=0.9, seed=7)["generations"]
    again = _generate(model, ["Hello"], temperature=1.0, top_k=50, top_p=0.9, seed=7)["generations"]
    assert first.tolist() == again.tolist()


def test_score_signatures_agree_with_an_untrained_model_being_near_uniform(exported_model, transform_artifacts):
    layer = tft.TFTransformOutput(transform_artifacts[0]).transform_features_layer()

    def transform_layer_ids(texts):
        return layer({"text": tf.reshape(tf.constant(texts), [-1, 1])})["token_ids"].to_list()

    client = ModelClient(exported_model[0])
    texts = ["hello there", "ab"]
    scores = client.score(texts)
    token_ids = transform_layer_ids(texts)
    assert scores.num_tokens.tolist() == [len(ids) + 1 for ids in token_ids]  # tokens + closing EOS
    assert np.all(np.abs(scores.mean_nll - np.log(TINY_VOCAB)) < 1.5)
    block = np.array([[EOS_ID] + token_ids[0] + [EOS_ID]], np.int64)
    nll_sum, num_tokens = client.score_tokens(block)
    assert num_tokens == len(token_ids[0]) + 1
    np.testing.assert_allclose(nll_sum / num_tokens, scores.mean_nll[0], rtol=1e-4)


def test_score_continuation_batches_rows_by_length_and_answers_in_the_callers_order(exported_model):
    """Rows are batched by length to pad less; each row's result is the one it gets alone."""
    prefixes = ["a much longer prefix about the sync of the notes,", "Hi", "", "the notes", "Hello there, the sync"]
    continuations = [" ok.", " and thanks for the long wait.", " hello", " stopped.", " x"]
    batched = ModelClient(exported_model[0], batch_size=2, required=(signatures.SCORE_CONTINUATION,))
    alone = ModelClient(exported_model[0], batch_size=1, required=(signatures.SCORE_CONTINUATION,))
    together, single = (
        batched.score_continuation(prefixes, continuations),
        alone.score_continuation(prefixes, continuations),
    )
    assert together.num_tokens.tolist() == single.num_tokens.tolist() and len(set(single.num_tokens.tolist())) > 2
    np.testing.assert_allclose(together.nll_sum, single.nll_sum, rtol=1e-4, atol=1e-4)


def test_score_continuation_scores_only_the_continuation_after_its_prefix(exported_model, transform_artifacts):
    """By the chain rule, the continuation's NLL is the whole block's minus the prefix block's; a
    prefix too long for the context is cut from the left, and the row says so."""
    layer = tft.TFTransformOutput(transform_artifacts[0]).transform_features_layer()

    def ids(text):
        return layer({"text": tf.reshape(tf.constant([text]), [-1, 1])})["token_ids"].to_list()[0]

    client = ModelClient(exported_model[0], required=(signatures.SCORE_CONTINUATION, signatures.SCORE_TOKENS))
    long_prefix = "the sync of the notes stopped " * 8
    prefixes, continuation = ["Hello there,", "", long_prefix], " and thanks."
    scores = client.score_continuation(prefixes, [continuation] * 3)
    assert scores.num_tokens.tolist() == [len(ids(continuation))] * 3
    assert scores.truncated.tolist() == [False, False, True]
    for prefix, nll_sum in zip(prefixes, scores.nll_sum):
        document = [EOS_ID] + (ids(prefix) if prefix else []) + ids(continuation)
        window = document[-(TINY.context_length + 1) :]
        whole, _ = client.score_tokens(np.array([window], np.int64))
        before, _ = client.score_tokens(np.array([window[: len(window) - len(ids(continuation))]], np.int64))
        np.testing.assert_allclose(nll_sum, whole - before, rtol=1e-4, atol=1e-4)


def test_the_prompt_conditions_the_output_and_generation_stops_at_the_context(exported_model):
    model, _ = exported_model
    outputs = _generate(model, ["aaaa", "zzzz"], max_new_tokens=TINY.context_length + 8)
    first, second = outputs["generations"].tolist()
    assert first != second
    counts = outputs["num_generated_tokens"]
    assert counts.max() <= TINY.context_length - 2  # [EOS] + at least one prompt token + new tokens fit the context
