"""The Tokenizer component's executor on real TFX artifacts: the sample, and the policy
learn / reuse / pinned / checkpoint / auto."""

import json
import os
import types

import apache_beam as beam
import pytest
import tensorflow as tf
from tfx.dsl.components.base import base_beam_executor
from tfx.types import standard_artifacts

from components.registry.options import RegistryOptions
from components.tokenizer import component, model_file, policy, sample
from components.tokenizer.graph import GraphTokenizer
from components.tokenizer.ids import MIN_VOCAB_SIZE
from components.tokenizer.options import TokenizerOptions, automatic_vocab_limit
from tests.conftest import BUNDLED_TXT
from tests.curation_corpora import dialogue
from tests.hf_checkpoints import checkpoint_with_tokenizer


def _write_examples(directory, documents):
    os.makedirs(directory, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(directory, "data.gz"), options="GZIP") as writer:
        for text in documents:
            feature = {"text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode()]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """An Examples artifact whose train split holds the bundled replies (span 3)."""
    root = tmp_path_factory.mktemp("examples")
    with open(BUNDLED_TXT, encoding="utf-8") as handle:
        documents = [d for d in handle.read(200_000).split("\n\n") if d.strip()]
    _write_examples(str(root / "Split-train"), documents)
    artifact = standard_artifacts.Examples()
    artifact.uri = str(root)
    artifact.split_names = json.dumps(["train"])
    artifact.set_int_custom_property("span", 3)
    return artifact


@pytest.fixture(scope="module")
def few_examples(tmp_path_factory):
    """Examples of the 40 short speeches that survived cleaning out of 1,000 (as the ingest report says)."""
    root = tmp_path_factory.mktemp("few")
    _write_examples(str(root / "Split-train"), dialogue(40))
    artifact = standard_artifacts.Examples()
    artifact.uri = str(root)
    artifact.split_names = json.dumps(["train"])
    artifact.set_string_custom_property(
        "ingest_report",
        json.dumps(
            {
                "documents_read": 1000,
                "documents_kept": 40,
                "removed": {"quality_stop_words": 900, "quality_short_lines": 60},
            }
        ),
    )
    return artifact


def _run(tmp_path, examples, name, production=None, monkeypatch=None, checkpoint="", **options):
    """Runs the executor with `options`; `production` is what the registry lookup answers."""
    output = component.Tokenizer()
    output.uri = str(tmp_path / name)
    if monkeypatch is not None:
        monkeypatch.setattr(component, "_find_production", lambda _: production)
    context = base_beam_executor.BaseBeamExecutor.Context(
        beam_pipeline_args=["--direct_running_mode=in_memory", "--direct_num_workers=1"],
        tmp_dir=str(tmp_path / f"tmp-{name}"),
        unique_id="1",
    )
    exec_properties = {
        "options": TokenizerOptions(**{"vocab_size": 1024, **options}).model_dump_json(),
        "text_feature": "text",
        "registry": RegistryOptions().to_parameter(),
        "model_name": "textgen",
        "registry_dir": str(tmp_path / "no-registry"),
        "checkpoint": checkpoint,
    }
    component.TokenizerExecutor(context).Do({"examples": [examples]}, {"tokenizer": [output]}, exec_properties)
    return output


def _production(saved_model_dir, proto):
    """A stand-in for the registry's answer: a pushed SavedModel directory holding the tokenizer asset."""
    model_file.copy_model(proto, model_file.saved_model_model_path(saved_model_dir))
    return types.SimpleNamespace(saved_model_dir=saved_model_dir, registered_version=4)


def _ids(tokenizer_artifact, texts):
    proto = model_file.read_model(model_file.artifact_model_path(tokenizer_artifact.uri)).proto
    return GraphTokenizer(proto).tokenize(tf.constant(texts)).to_list()


def test_learn_writes_the_model_and_what_it_was_learned_from(tmp_path, examples):
    """auto with an empty registry (the real lookup: no store exists) learns."""
    learned = _run(tmp_path, examples, "learned")
    model = model_file.read_model(model_file.artifact_model_path(learned.uri))
    assert learned.get_int_custom_property("vocab_size") == model.vocab_size == 1024
    assert learned.get_string_custom_property("sha256") == model.sha256
    assert learned.get_string_custom_property("algorithm") == "bpe"
    assert learned.get_string_custom_property("source") == "learned"
    assert learned.get_string_custom_property("source_detail") == "no production model yet"
    assert learned.get_string_custom_property("learned_from_examples") == examples.uri
    assert learned.get_int_custom_property("learned_from_span") == 3
    assert 0 < learned.get_int_custom_property("sample_chunks") <= 20_000
    assert not os.path.exists(os.path.join(str(tmp_path / "no-registry"), "mlflow.db"))  # the lookup created nothing


def test_an_unset_vocab_size_learns_the_largest_vocabulary_the_sample_supports(tmp_path, few_examples):
    learned = _run(tmp_path, few_examples, "auto", vocab_size=None)
    size = learned.get_int_custom_property("vocab_size")
    limit = learned.get_int_custom_property("vocab_size_limit")
    assert limit == automatic_vocab_limit(learned.get_int_custom_property("sample_bytes"))
    assert 320 <= size <= limit
    assert learned.get_string_custom_property("vocab_size_choice") == "auto"
    assert model_file.read_model(model_file.artifact_model_path(learned.uri)).vocab_size == size


def test_the_automatic_vocabulary_has_at_most_one_piece_per_128_bytes_of_sample_text():
    assert automatic_vocab_limit(57_330) == 384  # 400 Shakespeare speeches: 447 pieces, rounded down to 64s
    assert automatic_vocab_limit(600_000) == 4096  # the bundled corpus's train split keeps the full size
    assert automatic_vocab_limit(10_000_000) == 4096
    assert automatic_vocab_limit(1_000) == MIN_VOCAB_SIZE


def test_an_explicit_vocab_size_the_sample_cannot_support_names_the_survivors_of_cleaning(tmp_path, few_examples):
    with pytest.raises(
        ValueError,
        match=r"tokenizer.vocab_size=4096 is more than the sample supports .*"
        r"40 of 1000 documents survived cleaning \(removed the most: quality_stop_words 900",
    ):
        _run(tmp_path, few_examples, "strict", vocab_size=4096)


def test_the_sample_is_bounded_and_the_same_on_every_run(tmp_path, examples):
    pattern = [os.path.join(examples.uri, "Split-train", "*")]
    draws = [
        sample.draw_sample(beam.Pipeline(), pattern, "text", 50, 100, str(tmp_path / f"sample-{run}.gz"))
        for run in range(2)
    ]
    assert len(draws[0].chunks) == 50 and all(len(chunk) <= 100 for chunk in draws[0].chunks)
    assert sorted(draws[0].chunks) == sorted(draws[1].chunks)


def test_reuse_takes_the_production_models_tokenizer_and_gives_the_same_ids(tmp_path, examples, monkeypatch):
    learned = _run(tmp_path, examples, "first", policy="learn")
    proto = model_file.read_model(model_file.artifact_model_path(learned.uri)).proto
    production = _production(str(tmp_path / "serving" / "4"), proto)
    for name, policy_name in (("reused", "reuse"), ("auto", "auto")):
        reused = _run(tmp_path, examples, name, production, monkeypatch, policy=policy_name)
        assert reused.get_string_custom_property("source") == "reused"
        assert "registered version 4" in reused.get_string_custom_property("source_detail")
        assert reused.get_string_custom_property("sha256") == learned.get_string_custom_property("sha256")
        text = ["Hi Zoë, thanks for writing about sync. 中文 ▁"]
        assert _ids(reused, text) == _ids(learned, text)


def test_reuse_without_a_production_model_is_a_clear_error(tmp_path, examples, monkeypatch):
    with pytest.raises(ValueError, match="tokenizer.policy=reuse, but the model registry has no production model"):
        _run(tmp_path, examples, "none", None, monkeypatch, policy="reuse")


def test_auto_learns_when_the_production_model_predates_the_tokenizer_stage(tmp_path, examples, monkeypatch):
    old = types.SimpleNamespace(saved_model_dir=str(tmp_path / "old"), registered_version=2)
    learned = _run(tmp_path, examples, "after-old", old, monkeypatch, policy="auto")
    assert learned.get_string_custom_property("source") == "learned"
    assert "registered version 2) has no SentencePiece tokenizer" in learned.get_string_custom_property("source_detail")
    with pytest.raises(FileNotFoundError, match="sentencepiece.model does not exist"):
        _run(tmp_path, examples, "reuse-old", old, monkeypatch, policy="reuse")


def test_pinned_file(tmp_path, examples, tokenizer_model):
    pinned = _run(tmp_path, examples, "pinned", policy="pinned", pinned_model_file=tokenizer_model)
    assert pinned.get_string_custom_property("source") == "pinned"
    assert pinned.get_string_custom_property("sha256") == model_file.read_model(tokenizer_model).sha256
    missing = str(tmp_path / "nowhere" / "sp.model")
    with pytest.raises(FileNotFoundError, match=f"tokenizer.pinned_model_file {missing} does not exist"):
        _run(tmp_path, examples, "missing", policy="pinned", pinned_model_file=missing)


def test_options_need_a_file_exactly_when_pinned():
    with pytest.raises(ValueError, match="policy 'pinned' needs pinned_model_file"):
        TokenizerOptions(policy="pinned")
    with pytest.raises(ValueError, match="pinned_model_file is set but policy is 'auto'"):
        TokenizerOptions(pinned_model_file="/m.model")


def test_policy_consults_the_registry_only_when_needed():
    def no_lookup():
        raise AssertionError("looked up the registry")

    assert policy.choose("learn", "", no_lookup).action == policy.LEARN
    assert policy.choose("auto", "", lambda: None) == policy.Choice(policy.LEARN, "", "no production model yet")


def test_tokenizing_transform_is_transform_with_a_tokenizer_input():
    """Same parameters and outputs as the stock Transform, plus the `tokenizer` channel; the
    executor is the stock one's subclass."""
    from tfx import types as tfx_types
    from tfx.components import Transform
    from tfx.components.transform.executor import Executor

    from components.transform.component import TokenizingTransform

    channels = {
        name: tfx_types.Channel(type=artifact_type)
        for name, artifact_type in (
            ("examples", standard_artifacts.Examples),
            ("schema", standard_artifacts.Schema),
            ("tokenizer", component.Tokenizer),
        )
    }
    arguments = dict(
        examples=channels["examples"],
        schema=channels["schema"],
        preprocessing_fn="components.transform.preprocessing.preprocessing_fn",
    )
    tokenizing = TokenizingTransform(tokenizer=channels["tokenizer"], **arguments)
    stock = Transform(**arguments)
    assert tokenizing.exec_properties == stock.exec_properties
    assert set(tokenizing.outputs) == set(stock.outputs)
    assert set(tokenizing.inputs) == set(stock.inputs) | {"tokenizer"}
    assert issubclass(tokenizing.executor_spec.executor_class, Executor)


HF_TOKENIZERS = os.path.join(os.path.dirname(__file__), "fixtures", "hf", "tokenizers")


@pytest.mark.parametrize("policy_name", ["checkpoint", "auto"])
def test_checkpoint_policy_copies_the_checkpoints_tokenizer_with_its_hashes(tmp_path, examples, policy_name):
    from components.tokenizer import loaded

    checkpoint = checkpoint_with_tokenizer("llama", str(tmp_path / "checkpoint"), "llama_sp_nfkc")
    output = _run(tmp_path, examples, "ckpt", checkpoint=checkpoint, policy=policy_name)
    assert output.get_string_custom_property("source") == "checkpoint"
    assert output.get_string_custom_property("algorithm") == "sentencepiece_bpe"  # tokenizer.json, as transformers
    assert output.get_int_custom_property("vocab_size") == 512
    hashes = json.loads(output.get_string_custom_property("file_sha256"))
    assert set(hashes) == {"tokenizer.json", "tokenizer_config.json"}
    assert json.loads(output.get_string_custom_property("unused_files")) == ["tokenizer.model"]
    checked = json.loads(output.get_string_custom_property("tokenizers_agreement"))
    assert checked["equal"] is True and checked["sample_texts"] > 0 and checked["fixed_texts"] >= 10
    artifact = loaded.load(output.uri)
    assert artifact.sha256 == output.get_string_custom_property("sha256") == loaded.load(checkpoint).sha256
    assert artifact.special.eos_id == 2 and artifact.special.document_prefix == (1,)
    assert not os.path.exists(os.path.join(output.uri, model_file.MODEL_FILE_NAME))


def test_a_graph_that_differs_from_tokenizers_stops_the_stage_naming_the_text_and_both_id_lists(
    tmp_path, examples, monkeypatch
):
    """As if the graph still read tokenizer.model: on the nmt_nfkc fixture its ids differ."""
    from components.tokenizer import agreement, loaded
    from components.tokenizer.sentencepiece_graph import CheckpointSentencePieceGraph

    checkpoint = checkpoint_with_tokenizer("llama", str(tmp_path / "checkpoint"), "llama_sp_nfkc")
    with open(os.path.join(checkpoint, "tokenizer.model"), "rb") as handle:
        native = handle.read()
    monkeypatch.setattr(loaded.LoadedTokenizer, "graph", lambda self, name=None: CheckpointSentencePieceGraph(native))
    with pytest.raises(agreement.TokenizerMismatch) as error:
        _run(tmp_path, examples, "mismatch", checkpoint=checkpoint, policy="checkpoint")
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{os.path.join(checkpoint, 'tokenizer.json')}: ")
    assert '"KING HENRY:\\nNow"' in message and "graph [" in message and "tokenizers [" in message
    assert not os.path.exists(tmp_path / "mismatch" / "tokenizer.json")  # nothing written


def test_a_checkpoint_without_tokenizer_files_is_a_one_line_error_naming_it(tmp_path, examples):
    empty = tmp_path / "checkpoint"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=f"no tokenizer files in {empty}"):
        _run(tmp_path, examples, "none", checkpoint=str(empty), policy="checkpoint")


def test_the_checkpoint_policy_and_model_checkpoint_go_together():
    with pytest.raises(ValueError, match="tokenizer.policy=checkpoint needs model.checkpoint"):
        policy.choose("checkpoint", "", lambda: None)
    with pytest.raises(ValueError, match="tokenizer.policy=learn with model.checkpoint /c"):
        policy.choose("learn", "", lambda: None, checkpoint="/c")
    assert (
        policy.choose("auto", "", lambda: pytest.fail("no registry lookup"), checkpoint="/c").action
        == policy.CHECKPOINT
    )


def _checkpoint_production(tmp_path, checkpoint: str, version: int = 7):
    """A stand-in for the registry's answer: a pushed SavedModel directory whose assets hold the
    checkpoint's tokenizer as an export writes them (its files and special_tokens.json)."""
    from components.tokenizer import loaded

    saved_model_dir = str(tmp_path / "serving" / str(version))
    loaded.load(checkpoint).write(loaded.saved_model_dir(saved_model_dir))
    return types.SimpleNamespace(saved_model_dir=saved_model_dir, registered_version=version)


def test_reuse_takes_a_checkpoint_tokenizer_from_the_production_models_assets(tmp_path, examples, monkeypatch):
    """The second run of a model fine-tuned from a checkpoint: the production model's copy of the
    checkpoint's tokenizer, checked against the checkpoint, with the same hash; the chat record a
    conversation-tuned production copy carries stays out of a plain-text run."""
    from components.tokenizer import chat_template, loaded

    checkpoint = checkpoint_with_tokenizer("gpt2", str(tmp_path / "checkpoint"))
    production = _checkpoint_production(tmp_path, checkpoint)
    assets = loaded.saved_model_dir(production.saved_model_dir)
    for name in (chat_template.GRAMMAR_FILE, chat_template.TEMPLATE_FILE):
        with open(os.path.join(assets, name), "w", encoding="utf-8") as handle:
            handle.write("{}")
    reused = _run(tmp_path, examples, "reused", production, monkeypatch, checkpoint=checkpoint, policy="reuse")
    assert reused.get_string_custom_property("source") == "reused"
    assert "registered version 7" in reused.get_string_custom_property("source_detail")
    assert reused.get_string_custom_property("model_path") == assets
    assert (
        reused.get_string_custom_property("sha256") == loaded.load(checkpoint).sha256 == loaded.load(reused.uri).sha256
    )
    assert reused.get_string_custom_property("algorithm") == "byte_level_bpe"
    assert json.loads(reused.get_string_custom_property("tokenizers_agreement"))["equal"] is True
    assert not os.path.exists(os.path.join(reused.uri, chat_template.GRAMMAR_FILE))
    assert loaded.load(reused.uri).chat() is None


def test_reuse_with_a_checkpoint_needs_a_production_model_with_a_checkpoints_tokenizer(tmp_path):
    learned = types.SimpleNamespace(saved_model_dir=str(tmp_path / "serving" / "3"), registered_version=3)
    model_file.copy_model(b"not read", model_file.saved_model_model_path(learned.saved_model_dir))
    with pytest.raises(
        ValueError,
        match="the production model .registered version 3. has a learned SentencePiece "
        "model, not a checkpoint's tokenizer",
    ):
        policy.choose("reuse", "", lambda: learned, checkpoint="/c")
    with pytest.raises(ValueError, match="no production model to reuse"):
        policy.choose("reuse", "", lambda: None, checkpoint="/c")


def test_the_stage_checks_the_checkpoint_against_the_tokenizer_before_transform(tmp_path, examples, monkeypatch):
    """Inside a run (on Kubeflow no CLI checks the checkpoint first) the Tokenizer stage refuses a
    checkpoint the Trainer could not import, from its headers, before Transform: here a reused
    tokenizer of 512 tokens for a checkpoint whose embedding has 500 rows, then weights cut short."""
    from safetensors.numpy import load_file, save_file

    from components.trainer.checkpoint.errors import CheckpointError

    production = _checkpoint_production(tmp_path, checkpoint_with_tokenizer("gpt2", str(tmp_path / "first")))
    checkpoint = checkpoint_with_tokenizer("gpt2", str(tmp_path / "checkpoint"))
    weights = os.path.join(checkpoint, "model.safetensors")
    tensors = load_file(weights)
    tensors["transformer.wte.weight"] = tensors["transformer.wte.weight"][:500].copy()
    save_file(tensors, weights)
    with open(os.path.join(checkpoint, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    with open(os.path.join(checkpoint, "config.json"), "w", encoding="utf-8") as handle:
        json.dump({**config, "vocab_size": 500}, handle)
    with pytest.raises(CheckpointError) as refused:
        _run(tmp_path, examples, "larger", production, monkeypatch, checkpoint=checkpoint, policy="reuse")
    assets_tokenizer = os.path.join(production.saved_model_dir, "assets", "tokenizer.json")
    assert str(refused.value).startswith(
        f"{assets_tokenizer}: 512 tokens, more than the 500 rows of the model's token embedding"
    )
    with open(weights, "r+b") as handle:
        handle.truncate(os.path.getsize(weights) - 100)
    with pytest.raises(CheckpointError, match=f"{weights}: truncated: "):
        _run(tmp_path, examples, "truncated", checkpoint=checkpoint, policy="checkpoint")
    assert not os.path.exists(tmp_path / "larger") and not os.path.exists(tmp_path / "truncated")  # nothing written


@pytest.fixture(scope="module")
def order_examples(tmp_path_factory):
    """Examples of support replies that carry order numbers, amounts and dates."""
    import random

    rng = random.Random(5)
    root = tmp_path_factory.mktemp("orders")
    replies = [
        f"Order {rng.randrange(10_000, 100_000)} for {rng.choice(['Ana', 'Ravi', 'Mei'])} ships on "
        f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}: total ${rng.randrange(10, 999)}.99."
        for _ in range(2_000)
    ]
    _write_examples(str(root / "Split-train"), replies)
    artifact = standard_artifacts.Examples()
    artifact.uri = str(root)
    artifact.split_names = json.dumps(["train"])
    return artifact


def test_the_learned_tokenizer_splits_every_digit_and_records_it(tmp_path, order_examples, caplog):
    learned = _run(tmp_path, order_examples, "digits", vocab_size=None)
    found = json.loads(learned.get_string_custom_property("number_splitting"))
    assert found["merges_digits"] is False and found["alone_fraction"] == 1.0
    assert found["digits"] > 4_000  # the sample's numbers were measured, not only the fixed examples
    assert found["examples"]["Your order 50440 ships on 2026-12-06."][-11:] == list("2026-12-06.")
    assert _ids(learned, ["50440"])[0] == [token for [token] in _ids(learned, list("50440"))]  # one token a digit
    assert "digits merge" not in caplog.text


def test_a_tokenizer_that_merges_digits_is_reported_and_warned_about(tmp_path, order_examples, caplog):
    """The behaviour before split_digits, and what a pinned or checkpoint tokenizer may do."""
    learned = _run(tmp_path, order_examples, "merged", vocab_size=None, split_digits=False)
    found = json.loads(learned.get_string_custom_property("number_splitting"))
    assert found["merges_digits"] is True and found["alone_fraction"] < 0.5
    assert "digits merge" in caplog.text and "(learned)" in caplog.text
    caplog.clear()
    pinned = _run(
        tmp_path,
        order_examples,
        "pinned-merged",
        policy="pinned",
        pinned_model_file=model_file.artifact_model_path(learned.uri),
        vocab_size=None,
    )
    assert json.loads(pinned.get_string_custom_property("number_splitting"))["merges_digits"] is True
    assert "Tokenizer (pinned): digits merge" in caplog.text
