"""The evaluator: perplexity on packed eval blocks and the blessing decision, both directions."""

import math
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from components.evaluator.metrics.perplexity import (
    UnigramReference,
    decide_blessing,
    eval_split_perplexity,
    unigram_gain_gate,
    unigram_reference,
)
from components.evaluator.options import EvaluatorOptions
from tests.conftest import FIXTURE_VOCAB_SIZE, write_raw_examples


@pytest.mark.parametrize(
    "perplexity, threshold, blessed",
    [
        (5.0, 12.0, True),
        (11.999, 12.0, True),
        (12.0, 12.0, False),
        (40.0, 12.0, False),
        (math.nan, 12.0, False),
        (math.inf, 12.0, False),
    ],
)
def test_blessing_decision(perplexity, threshold, blessed):
    decision = decide_blessing(perplexity, threshold)
    assert decision.blessed is blessed
    assert str(threshold)[:2] in decision.reason or "perplexity is" in decision.reason


def test_untrained_model_is_near_uniform_and_is_blocked_by_a_real_threshold(exported_model, transform_artifacts):
    """A random model's perplexity is close to the vocabulary size: blocked at 12, passed at 1000."""
    model_dir = exported_model[1]
    output_dir, examples, documents = transform_artifacts
    spec = tft.TFTransformOutput(output_dir).transformed_feature_spec()
    result = eval_split_perplexity(model_dir, examples, spec, batch_size=4)
    output = tft.TFTransformOutput(output_dir)
    transformed = output.transform_features_layer()({"text": tf.reshape(tf.constant(documents), [-1, 1])})
    total_tokens = int(tf.reduce_sum(transformed["num_tokens"])) + len(documents)  # + one EOS each
    assert result.num_tokens == (total_tokens // 33) * 32  # whole packed blocks of context 32
    vocab_size = FIXTURE_VOCAB_SIZE
    assert vocab_size / 4 < result.perplexity < vocab_size * 4
    assert not decide_blessing(result.perplexity, 12.0).blessed
    assert decide_blessing(result.perplexity, 1000.0).blessed


def test_unigram_reference_is_the_smoothed_train_frequencies_cross_entropy_on_eval():
    # train: id 0 three times, id 1 once; eval: each twice; ids 0..1 seen, smoothing 0.5 each
    reference = unigram_reference(np.array([3, 1]), np.array([2, 2]))
    p0, p1 = 3.5 / 5.0, 1.5 / 5.0
    assert reference.mean_nll == pytest.approx(-(2 * math.log(p0) + 2 * math.log(p1)) / 4)
    assert (reference.train_tokens, reference.eval_tokens) == (4, 4)
    unseen = unigram_reference(np.array([4]), np.array([0, 1]))  # an eval id the train split never had
    assert unseen.mean_nll == pytest.approx(-math.log(0.5 / 5.0))


@pytest.mark.parametrize("candidate_nll, verdict", [(2.0, "PASS"), (4.9, "FAIL"), (5.5, "FAIL"), (math.nan, "FAIL")])
def test_gain_over_unigram_gate_in_both_directions(candidate_nll, verdict):
    reference = UnigramReference(5.0, 100, 50)
    gate = unigram_gain_gate(candidate_nll, reference, 0.05)
    assert gate.verdict == verdict and "unigram" in gate.reason
    assert unigram_gain_gate(2.0, None, 0.05).verdict == "SKIPPED"


def test_an_untrained_model_does_not_beat_the_unigram_reference(exported_model, transform_artifacts):
    """The untrained fixture model is near uniform over its vocabulary; a unigram model of the
    same tokens is better, so the relative quality gate refuses it whatever the perplexity gate says."""
    from components.evaluator.metrics.perplexity import QualityRequest, measure_quality

    output_dir, examples, _ = transform_artifacts
    spec = tft.TFTransformOutput(output_dir).transformed_feature_spec()
    request = QualityRequest({"candidate": exported_model[1]}, examples, spec, {}, train_files=examples)
    perplexities, _, reference = measure_quality(request)
    assert reference is not None and reference.perplexity < perplexities["candidate"].perplexity
    gate = unigram_gain_gate(perplexities["candidate"].mean_nll, reference, EvaluatorOptions().min_gain_over_unigram)
    assert gate.verdict == "FAIL" and gate.value < 0


def test_each_saved_model_is_loaded_once_per_process_for_all_its_scoring(
    exported_model, transform_artifacts, tmp_path, monkeypatch
):
    """The candidate scored alone, then as packed blocks and as raw text beside a baseline in one
    Beam run, then called by the probes' client: each SavedModel is loaded once (TensorFlow keeps a
    loaded model's memory after the object is gone: a 1.1B one is 5.4 GiB a load, and the repeated
    loads did not fit in 24 GiB); an export rewritten in place is loaded anew."""
    from components.evaluator.metrics.perplexity import QualityRequest, measure_quality
    from components.model_client import ModelClient

    output_dir, examples, documents = transform_artifacts
    spec = tft.TFTransformOutput(output_dir).transformed_feature_spec()
    raw = write_raw_examples(str(tmp_path / "eval.gz"), documents)
    candidate, baseline = str(tmp_path / "candidate"), str(tmp_path / "baseline")
    shutil.copytree(exported_model[1], candidate)
    shutil.copytree(exported_model[1], baseline)
    loads, load = [], tf.saved_model.load
    monkeypatch.setattr(
        tf.saved_model, "load", lambda path, *args, **kwargs: loads.append(path) or load(path, *args, **kwargs)
    )
    alone = eval_split_perplexity(candidate, examples, spec)
    request = QualityRequest(
        {"candidate": candidate}, examples, spec, {"candidate": candidate, "baseline": baseline}, [raw]
    )
    perplexities, bits, _ = measure_quality(request)
    ModelClient(candidate).score(documents[:1])
    ModelClient(baseline).score(documents[:1])
    assert sorted(loads) == sorted([candidate, baseline])
    assert perplexities["candidate"].perplexity == pytest.approx(alone.perplexity, rel=1e-6)
    assert bits["baseline"] == pytest.approx(bits["candidate"], rel=1e-6)  # the same weights

    graph = os.path.join(candidate, "saved_model.pb")
    os.utime(graph, ns=(os.stat(graph).st_atime_ns, os.stat(graph).st_mtime_ns + 10**9))
    ModelClient(candidate)
    assert loads.count(candidate) == 2


def test_missing_eval_examples_are_a_clear_error(exported_model, tmp_path, transform_artifacts):
    output_dir, _, _ = transform_artifacts
    spec = tft.TFTransformOutput(output_dir).transformed_feature_spec()
    with pytest.raises(FileNotFoundError, match="no transformed examples"):
        eval_split_perplexity(exported_model[1], str(tmp_path / "none*"), spec)


@pytest.fixture(scope="module")
def other_tokenizer_export(tiny_backbone, tmp_path_factory):
    """(export dir, model file): the fixture backbone exported with another SentencePiece model of
    the same size, i.e. the same ids meaning other pieces."""
    import tensorflow_transform as tft

    from components.trainer.options import GenerationOptions
    from components.trainer.serving import export
    from components.transform.standalone import analyze_and_transform
    from tests.conftest import TRANSFORM_DOCUMENTS, learn_fixture_tokenizer

    root = tmp_path_factory.mktemp("other_tokenizer")
    model = learn_fixture_tokenizer(str(root / "other.model"), max_bytes=15_000)
    graph = analyze_and_transform(TRANSFORM_DOCUMENTS[:4], model, str(root / "graph"))
    export_dir = str(root / "export")
    export.export_serving_model(
        tiny_backbone,
        tft.TFTransformOutput(graph),
        GenerationOptions(max_new_tokens=4, temperature=0.0, top_k=0),
        export_dir,
    )
    return export_dir, model


def _windows(stream, context_length=32):
    """A token stream's consecutive blocks of context_length predictions (context_length + 1 tokens)."""
    return [stream[start : start + context_length + 1] for start in range(0, len(stream) - 1, context_length)]


def _independent_nll(score_tokens, stream) -> float:
    return sum(float(score_tokens(blocks=tf.constant([w], tf.int64))["nll_sum"].numpy()[0]) for w in _windows(stream))


def _independent_bits_per_byte(export_dir, model_path, documents):
    """Tokenized here with the sentencepiece library, scored with `score_tokens` window by window."""
    import sentencepiece as spm

    from components.tokenizer.ids import EOS_ID

    processor = spm.SentencePieceProcessor(model_file=model_path)
    score_tokens = tf.saved_model.load(export_dir).signatures["score_tokens"]
    nll = sum(_independent_nll(score_tokens, [EOS_ID] + processor.encode(d) + [EOS_ID]) for d in documents)
    return nll / math.log(2) / sum(len(d.encode("utf-8")) for d in documents)


def test_candidate_and_baseline_with_different_tokenizers_compare_in_bits_per_byte(
    exported_model, other_tokenizer_export, transform_artifacts, tokenizer_model, tmp_path
):
    """Each model tokenizes the raw eval text with its own tokenizer; the change gate is their
    bits-per-byte ratio, as computed independently here (not skipped, no id out of range)."""
    from components.evaluator.evaluation import EvaluationInputs, evaluate_candidate
    from components.evaluator.options import EvaluatorOptions

    output_dir, examples, documents = transform_artifacts
    raw = write_raw_examples(str(tmp_path / "eval.gz"), documents)
    config = EvaluatorOptions.model_validate(
        {
            "max_perplexity": 1e6,
            "max_bits_per_byte_increase": 0.0,
            "safety": {
                "prompts_per_category": 1,
                "completions_per_prompt": 1,
                "memorization_documents": 0,
                "max_new_tokens": 2,
            },
            "bias": {"templates_per_group": 0},
        }
    )
    baseline_dir, baseline_model = other_tokenizer_export
    evaluation = evaluate_candidate(
        EvaluationInputs(
            exported_model[1],
            examples,
            tft.TFTransformOutput(output_dir).transformed_feature_spec(),
            config,
            baseline_dir=baseline_dir,
            raw_eval_files=[raw],
        )
    )
    candidate_bpb = _independent_bits_per_byte(exported_model[1], tokenizer_model, documents)
    baseline_bpb = _independent_bits_per_byte(baseline_dir, baseline_model, documents)
    quality = evaluation.metrics["quality"]
    assert quality["bits_per_byte"] == pytest.approx(candidate_bpb, rel=1e-4)
    assert quality["baseline_bits_per_byte"] == pytest.approx(baseline_bpb, rel=1e-4)
    assert quality["text_tokens"] != quality["baseline_text_tokens"]  # the tokenizers really differ
    gate = next(g for g in evaluation.gates if g.name == "quality.bits_per_byte_change")
    assert not gate.skipped and gate.value == pytest.approx(candidate_bpb / baseline_bpb - 1, rel=1e-4)
    assert gate.passed == (candidate_bpb <= baseline_bpb)


def test_score_covers_a_document_longer_than_the_context(exported_model, tokenizer_model):
    """`score` cuts a long document into windows of context_length predictions; the sum equals
    scoring those windows as blocks with `score_tokens`."""
    import sentencepiece as spm

    from components.tokenizer.ids import EOS_ID

    model = tf.saved_model.load(exported_model[1])
    text = "Hi Zoë, thanks for writing about sync. Open Settings and choose Sync now. " * 4
    stream = [EOS_ID] + spm.SentencePieceProcessor(model_file=tokenizer_model).encode(text) + [EOS_ID]
    assert len(stream) - 1 > 2 * 32
    expected = _independent_nll(model.signatures["score_tokens"], stream)
    scored = model.signatures["score"](texts=tf.constant([text, "x"]))
    assert int(scored["num_tokens"][0]) == len(stream) - 1
    assert float(scored["mean_nll"][0]) * (len(stream) - 1) == pytest.approx(expected, rel=1e-4)


def test_a_fine_tuned_first_run_is_compared_with_its_base_checkpoint_and_production_wins_later(tmp_path):
    """The baseline: the registry's production model when there is one; on a first run, the
    pretrained checkpoint the Trainer exported beside a fine-tuned candidate; else none."""
    from types import SimpleNamespace

    from components.evaluator.component import _baseline
    from components.trainer.training import record

    scratch = SimpleNamespace(uri=str(tmp_path / "scratch"))
    fine_tuned = SimpleNamespace(uri=str(tmp_path / "fine_tuned"))
    os.makedirs(record.base_model_path(fine_tuned.uri))
    production = SimpleNamespace(model_artifact_uri="/runs/Trainer/model/3", saved_model_dir="/serving/3")
    assert _baseline(scratch, None) == (None, "no model is registered as production yet (first run)")
    assert _baseline(fine_tuned, None) == (record.base_model_path(fine_tuned.uri), "")
    assert _baseline(fine_tuned, production) == ("/serving/3", "")
