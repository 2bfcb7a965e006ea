"""Key/value-cache decoding and sampling: the cache changes speed, never results."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from components.tokenizer.ids import EOS_ID, PAD_ID
from components.trainer.model import decoding
from components.trainer.model.backbone import build_backbone
from components.trainer.model.sampling import allowed_token_mask, sample_next_token
from components.trainer.options import ModelOptions

# Each example builds and traces a model (seconds); shrinking would rebuild hundreds of them.
_SLOW_EXAMPLES = settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)


def _random_backbone(seed: int, num_layers: int, num_heads: int, head_dim: int, rotary: bool, vocab_size: int):
    tf.keras.utils.set_random_seed(seed)
    config = ModelOptions(
        num_layers=num_layers,
        num_heads=num_heads,
        model_dim=num_heads * head_dim,
        mlp_dim=2 * num_heads * head_dim,
        context_length=32,
        position_encoding="rotary" if rotary else "learned",
    )
    return build_backbone(config, vocab_size)


random_models = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 10_000),
        "num_layers": st.integers(1, 2),
        "num_heads": st.integers(1, 2),
        "head_dim": st.sampled_from([8, 16]),
        "rotary": st.booleans(),
        "vocab_size": st.integers(8, 64),
    }
)


@pytest.fixture(scope="module")
def tiny_backbone():
    """A random 2-layer, 2-head model with a 32-token context and 100 ids (no transform graph needed)."""
    return _random_backbone(seed=0, num_layers=2, num_heads=2, head_dim=16, rotary=False, vocab_size=100)


def _ragged(prompts):
    return tf.ragged.constant(prompts, dtype=tf.int64)


@pytest.mark.slow  # builds and traces several random models (40-120 s here)
@_SLOW_EXAMPLES
@given(model_args=random_models, data=st.data())
def test_cached_logits_match_full_recomputation_at_every_step(model_args, data):
    backbone = _random_backbone(**model_args)
    vocab = model_args["vocab_size"]
    prompts = data.draw(st.lists(st.lists(st.integers(2, vocab - 1), min_size=1, max_size=10), min_size=1, max_size=3))
    steps, cache_length = 8, 24
    lengths = np.array([len(p) for p in prompts], np.int32)
    width = int(lengths.max())
    padded = np.array([p + [PAD_ID] * (width - len(p)) for p in prompts], np.int64)
    logits, cache = backbone.prefill(tf.constant(padded), cache_length, tf.constant(lengths - 1))
    sequences = [list(p) for p in prompts]
    for _ in range(steps):
        for row, sequence in enumerate(sequences):
            full = backbone(tf.constant([sequence], tf.int64))[0, -1].numpy()
            np.testing.assert_allclose(logits[row].numpy(), full, atol=1e-4, rtol=0)
        next_ids = tf.argmax(logits, axis=-1)
        for row, token in enumerate(next_ids.numpy()):
            sequences[row].append(int(token))
        positions = tf.constant([len(s) - 1 for s in sequences], tf.int32)
        logits, cache = backbone.decode_step(next_ids, positions, cache)


@pytest.mark.slow  # builds and traces several random models (40-120 s here)
@_SLOW_EXAMPLES
@given(model_args=random_models, data=st.data())
def test_greedy_generation_with_the_cache_equals_recomputation(model_args, data):
    backbone = _random_backbone(**model_args)
    vocab = model_args["vocab_size"]
    prompts = data.draw(st.lists(st.lists(st.integers(2, vocab - 1), min_size=1, max_size=12), min_size=1, max_size=3))
    arguments = (_ragged(prompts), 10, 0.0, 0, 1.0, 0)
    cached_ids, cached_counts = decoding.generate_tokens(backbone, *arguments)
    full_ids, full_counts = decoding.generate_tokens_without_cache(backbone, *arguments)
    assert cached_ids.to_list() == full_ids.to_list()
    assert cached_counts.numpy().tolist() == full_counts.numpy().tolist()


def test_a_cache_that_grows_during_generation_changes_no_token():
    """In graph mode the cache starts at the prompts and grows by CACHE_GROWTH positions when the
    longest row fills it; generations that grow it (in a batch with rows of other lengths, and up
    to the full bucket) must equal recomputation and XLA (whose cache is the whole bucket)."""
    tf.keras.utils.set_random_seed(3)
    config = ModelOptions(num_layers=1, num_heads=2, model_dim=16, mlp_dim=32, context_length=192)
    backbone = build_backbone(config, 50)
    embeddings = backbone.token_embedding.embeddings
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[EOS_ID]], tf.zeros([1, 16])))  # never stops early
    new_tokens = 100
    for prompts in ([[5, 6, 7]], [[5, 6, 7], list(range(10, 45))]):
        arguments = (_ragged(prompts), new_tokens, 0.0, 0, 1.0, 0)
        cached_ids, cached_counts = decoding.generate_tokens(backbone, *arguments)
        assert cached_counts.numpy().tolist() == [new_tokens] * len(prompts)
        assert cached_ids.to_list() == decoding.generate_tokens_without_cache(backbone, *arguments)[0].to_list()
        assert cached_ids.to_list() == decoding.generate_tokens(backbone, *arguments, jit_compile=True)[0].to_list()


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_a_prompt_decodes_the_same_alone_and_in_a_batch_of_other_lengths(tiny_backbone, jit_compile):
    prompts = [[5, 6, 7], list(range(10, 30)), [9]]
    batch_ids, batch_counts = decoding.generate_tokens(tiny_backbone, _ragged(prompts), 12, 0.0, 0, 1.0, 0, jit_compile)
    for row, prompt in enumerate(prompts):
        alone_ids, alone_counts = decoding.generate_tokens(
            tiny_backbone, _ragged([prompt]), 12, 0.0, 0, 1.0, 0, jit_compile
        )
        assert alone_ids.to_list()[0] == batch_ids.to_list()[row]
        assert int(alone_counts[0]) == int(batch_counts[row])
    assert batch_counts.numpy().max() == 12 or EOS_ID in sum(batch_ids.to_list(), [])


def test_xla_and_graph_decoding_agree(tiny_backbone):
    prompts = _ragged([[5, 6, 7], list(range(10, 22))])
    graph_ids, _ = decoding.generate_tokens(tiny_backbone, prompts, 9, 0.0, 0, 1.0, 0, jit_compile=False)
    xla_ids, _ = decoding.generate_tokens(tiny_backbone, prompts, 9, 0.0, 0, 1.0, 0, jit_compile=True)
    assert graph_ids.to_list() == xla_ids.to_list()


def test_generation_stops_at_the_context_length(tiny_backbone):
    context = tiny_backbone.context_length
    long_prompt = list(range(3, 3 + 2 * context))
    ids, counts = decoding.generate_tokens(tiny_backbone, _ragged([long_prompt, [5]]), 100, 1.0, 0, 1.0, 3)
    # the long prompt keeps its last context/2 tokens (separator included), the short one 2
    assert counts.numpy().max() <= context - 2
    assert all(len(row) == count for row, count in zip(ids.to_list(), counts.numpy()))


def _allowed_by_definition(logits: np.ndarray, top_k: int, top_p: float) -> tuple:
    """The allowed set written out plainly: the k best, then the shortest prefix reaching mass p.

    Also says whether a cumulative mass lies within float rounding of p (the cut-off is then
    legitimately ambiguous by one token).
    """
    order = np.argsort(-logits.astype(np.float64), kind="stable")
    k = len(logits) if top_k <= 0 else min(top_k, len(logits))
    candidates = order[:k]
    borderline = False
    if 0.0 < top_p < 1.0:
        probabilities = np.exp(logits[candidates].astype(np.float64) - logits[candidates].max())
        probabilities /= probabilities.sum()
        before = np.concatenate([[0.0], np.cumsum(probabilities)[:-1]])
        borderline = bool(np.any(np.abs(before - top_p) < 1e-5))
        candidates = candidates[before < top_p]
    return set(candidates.tolist()), borderline


@settings(max_examples=40, deadline=None)
@given(
    # distinct by >= 0.1, so no two logits tie (ties at the cut-off are kept, by design)
    logits=st.lists(st.integers(-80, 80), min_size=2, max_size=40, unique=True),
    top_k=st.integers(0, 45),
    top_p=st.floats(0.05, 1.0),
    temperature=st.floats(0.3, 2.0),
    seed=st.integers(0, 2**31),
)
def test_top_k_and_top_p_never_emit_a_token_outside_the_allowed_set(logits, top_k, top_p, temperature, seed):
    row = np.array(logits, np.float32) / 10
    scaled = row / np.float32(temperature)
    allowed, borderline = _allowed_by_definition(scaled, top_k, top_p)
    mask = allowed_token_mask(tf.constant(scaled[np.newaxis]), top_k, top_p).numpy()[0]
    masked = set(np.flatnonzero(mask).tolist())
    if borderline:
        assert len(masked ^ allowed) <= 1
    else:
        assert masked == allowed
        batch = tf.constant(np.tile(row, (256, 1)))
        sampled = sample_next_token(batch, temperature, top_k, top_p, tf.constant([seed, 1], tf.int64)).numpy()
        assert set(sampled.tolist()) <= allowed


def test_sampling_spreads_over_the_allowed_set_and_greedy_takes_the_argmax():
    logits = tf.constant(np.tile(np.log([0.4, 0.3, 0.2, 0.1]).astype(np.float32), (2000, 1)))
    seed = tf.constant([7, 0], tf.int64)
    assert set(sample_next_token(logits, 1.0, 0, 1.0, seed).numpy().tolist()) == {0, 1, 2, 3}
    assert set(sample_next_token(logits, 1.0, 2, 1.0, seed).numpy().tolist()) == {0, 1}
    assert set(sample_next_token(logits, 1.0, 0, 0.65, seed).numpy().tolist()) == {0, 1}  # 0.4 < 0.65 <= 0.7
    assert set(sample_next_token(logits, 0.0, 0, 0.65, seed).numpy().tolist()) == {0}


def test_seeded_sampling_is_reproducible_and_the_seed_matters(tiny_backbone):
    prompts = _ragged([[5, 6, 7], [9, 10]])

    def sample(seed):
        return decoding.generate_tokens(tiny_backbone, prompts, 10, 1.0, 0, 0.95, seed)[0].to_list()

    assert sample(11) == sample(11)
    assert sample(11) != sample(12)
