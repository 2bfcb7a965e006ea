"""Packing conversations into training rows (components/trainer/training/packing.py) and the
backbone's block-diagonal attention over them: rows, segments, positions and weights as the
module says; a conversation's loss is the same packed as alone, and the test can tell when the
mask is missing; training on the loss mask learns replies, not prompts."""

import numpy as np
import pytest
import tensorflow as tf

from components.trainer.training import packing
from components.transform.preprocessing import LOSS_MASK_KEY, TOKEN_IDS_KEY

SPEC = {
    TOKEN_IDS_KEY: tf.io.RaggedFeature(tf.int64, value_key=TOKEN_IDS_KEY),
    LOSS_MASK_KEY: tf.io.RaggedFeature(tf.int64, value_key=LOSS_MASK_KEY),
}


def _write(path, conversations):
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for ids, mask in conversations:
            feature = {
                TOKEN_IDS_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
                LOSS_MASK_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=mask)),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return str(path)


CONVERSATIONS = [
    ([10, 11, 12, 13], [0, 0, 1, 1]),
    ([20, 21, 22], [0, 1, 1]),
    ([30, 31, 32, 33, 34, 35, 36, 37, 38, 39], [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]),  # its reply falls past the row: dropped
    ([40, 41], [0, 1]),
]


def test_rows_segments_positions_and_weights(tmp_path):
    path = _write(tmp_path / "c.gz", CONVERSATIONS)
    rows = list(packing.packed_batches(path, SPEC, context_length=7, batch_size=8))
    assert len(rows) == 1
    batch = {key: value.numpy() for key, value in rows[0].items()}
    # Row 1: conversations 1 and 2 (7 of 8 tokens), row 2: conversation 4; conversation 3 dropped.
    assert batch["inputs"].tolist() == [[10, 11, 12, 13, 20, 21, 22], [40, 41, 0, 0, 0, 0, 0]]
    assert batch["targets"].tolist() == [[11, 12, 13, 20, 21, 22, 0], [41, 0, 0, 0, 0, 0, 0]]
    assert batch["segments"].tolist() == [[1, 1, 1, 1, 2, 2, 2], [1, 1, 0, 0, 0, 0, 0]]
    assert batch["positions"].tolist() == [[0, 1, 2, 3, 0, 1, 2], [0, 1, 0, 0, 0, 0, 0]]
    # Targets weighted by their own mask; the first token of a conversation and padding get none.
    assert batch["weights"].tolist() == [[0, 1, 1, 0, 1, 1, 0], [1, 0, 0, 0, 0, 0, 0]]


def test_packing_stats_count_what_is_dropped_cut_and_how_full_rows_are(tmp_path):
    path = _write(tmp_path / "c.gz", CONVERSATIONS)
    stats = packing.packing_stats(path, SPEC, context_length=7)
    assert (stats.conversations, stats.dropped_without_supervised_tokens, stats.truncated, stats.rows) == (4, 1, 1, 2)
    assert (stats.real_tokens, stats.supervised_tokens) == (9, 5)
    assert stats.real_fraction == pytest.approx(9 / 16) and stats.supervised_fraction == pytest.approx(5 / 14)


def _tiny_model(vocab=64, context=16, seed=3):
    from components.trainer.model.backbone import build_backbone
    from components.trainer.options import ModelOptions

    tf.keras.utils.set_random_seed(seed)
    return build_backbone(
        ModelOptions(num_layers=2, num_heads=2, model_dim=32, mlp_dim=64, context_length=context), vocab
    )


@pytest.mark.parametrize("recompute", ["off", "attention"])
def test_a_conversation_scores_the_same_packed_after_another_as_alone(recompute):
    """Its logits in a packed row equal its logits alone; without the segment mask they differ
    (so this test fails if the mask is lost)."""
    from components.trainer.model.backbone import build_backbone
    from components.trainer.options import ModelOptions

    tf.keras.utils.set_random_seed(3)
    model = build_backbone(
        ModelOptions(num_layers=2, num_heads=2, model_dim=32, mlp_dim=64, context_length=16), 64, recompute=recompute
    )
    first, second = [5, 6, 7, 8, 9], [11, 12, 13, 14]
    alone = model(tf.constant([second]), training=recompute != "off").numpy()[0]
    packed_ids = tf.constant([first + second])
    segments = tf.constant([[1] * len(first) + [2] * len(second)])
    positions = tf.constant([list(range(len(first))) + list(range(len(second)))])
    packed = model(packed_ids, training=recompute != "off", positions=positions, segment_ids=segments).numpy()[0]
    np.testing.assert_allclose(packed[len(first) :], alone, rtol=1e-5, atol=1e-5)
    leaked = model(packed_ids, training=recompute != "off", positions=positions).numpy()[0]
    assert np.abs(leaked[len(first) :] - alone).max() > 1e-3


def test_training_on_the_loss_mask_learns_replies_and_leaves_prompts_untrained(tmp_path):
    """Prompts and replies are each a learnable pattern; only replies are in the mask. After
    training, the reply loss fell far and the prompt loss did not move much; with every token in
    the mask (the control), the prompt loss falls too."""
    from components.trainer.options import TrainingOptions
    from components.trainer.training.loop import LanguageModelTrainer, LoopSettings, loss_and_weight
    from components.trainer.training.optimizer import make_optimizer

    rng = np.random.default_rng(0)
    prompt, reply = [3, 4, 5, 6, 7, 8], [40, 41, 42, 43]

    def corpus(reply_only):
        rows = []
        for _ in range(64):
            noise = rng.integers(10, 30, size=2).tolist()  # a little variety per conversation
            ids = noise + prompt + reply
            mask = [0] * (len(noise) + len(prompt)) + [1] * len(reply) if reply_only else [1] * len(ids)
            rows.append((ids, mask))
        return _write(tmp_path / f"train-{reply_only}.gz", rows)

    def losses(model, path, positions_of):
        batch = next(iter(packing.packed_batches(path, SPEC, context_length=15, batch_size=8)))
        logits = model(batch["inputs"], positions=batch["positions"], segment_ids=batch["segments"])
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["targets"], logits=logits).numpy()
        targets = batch["targets"].numpy()
        same = batch["segments"].numpy()[:, 1:] == batch["segments"].numpy()[:, :-1]
        valid = np.concatenate([same, np.zeros([same.shape[0], 1], bool)], axis=1) & (batch["segments"].numpy() > 0)
        chosen = np.isin(targets, positions_of) & valid
        return float(nll[chosen].mean())

    results = {}
    for reply_only in (True, False):
        path = corpus(reply_only)
        model = _tiny_model(context=15)
        training = TrainingOptions(train_steps=60, batch_size=8, warmup_steps=5, learning_rate=3e-3)
        strategy = tf.distribute.get_strategy()
        optimizer = make_optimizer(training, "float32")
        trainer = LanguageModelTrainer(
            model,
            optimizer,
            strategy,
            LoopSettings(
                total_steps=60,
                global_batch_size=8,
                context_length=15,
                log_every=60,
                checkpoint_every=1000,
                jit_compile=False,
            ),
            str(tmp_path / f"ckpt-{reply_only}"),
        )
        before = (losses(model, path, prompt[1:]), losses(model, path, reply))
        trainer.train(
            lambda start, path=path: iter(
                packing.packed_batches(path, SPEC, 15, 8, shuffle_buffer=64, seed=start, repeat=True)
            )
        )
        after = (losses(model, path, prompt[1:]), losses(model, path, reply))
        results[reply_only] = (before, after)
        assert loss_and_weight(model, next(iter(packing.packed_batches(path, SPEC, 15, 8))), False)[1] > 0
    (prompt_before, reply_before), (prompt_after, reply_after) = results[True]
    assert reply_after < 0.2 * reply_before, results
    assert prompt_after > 0.7 * prompt_before, results  # not trained on: at most a little transfer
    (prompt_before, _), (prompt_after_all, _) = results[False]
    assert prompt_after_all < 0.3 * prompt_before, results  # the control: the same prompts are learnable
