"""Prompts framed as the checkpoint's tokenizer frames them: the served model answers as transformers does.

transformers does not run in the test environment. tests/fixtures/hf/<family>/expected_text.json
holds what transformers 4.57 did in the reference environment (tests/fixtures/make_hf_checkpoints.py)
on the checkpoint assembled with its tokenizer: the ids `AutoTokenizer` encoded each text prompt to
and the greedy continuation `generate` made. Here:

1. `tokenizers`' ids (tokenizer.json) plus the framing rule (hf_files.prompt_framing) are exactly the
   ids transformers encoded each prompt to: GPT-2 adds nothing, Llama adds <s>;
2. the SavedModel exported from the checkpoint's unchanged weights (what TF Serving serves)
   generates the same text and number of tokens, called the way `textgen generate` calls it;
3. framed the old way (the document separator before every prompt), GPT-2 would answer otherwise,
   so the comparison can fail;
4. `score_continuation` scores a continuation after the prefix framed the same way.

The framing rule's other cases (add_bos_token / add_eos_token, a TemplateProcessing post-processor,
GPT2TokenizerFast ignoring add_bos_token) were checked by hand against transformers 4.57.6 in the
reference environment; `test_the_framing_rule` pins them.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from tokenizers import Tokenizer as HfTokenizer

from components.tokenizer import hf_files, loaded
from tests.hf_checkpoints import FIXTURES, PAIRS, checkpoint_with_tokenizer, expected_text

FAMILIES = ["gpt2", "llama"]


@pytest.fixture(scope="module", params=FAMILIES)
def served(request, tmp_path_factory):
    """(family, checkpoint directory, backbone, exported SavedModel directory), weights unchanged."""
    import tensorflow_transform as tft

    from components.trainer.checkpoint.hf_weights import import_checkpoint
    from components.trainer.options import GenerationOptions
    from components.trainer.serving import export
    from components.transform.standalone import analyze_and_transform

    root = tmp_path_factory.mktemp(request.param)
    checkpoint = checkpoint_with_tokenizer(request.param, str(root / "checkpoint"))
    backbone, _ = import_checkpoint(checkpoint)
    transform_dir = analyze_and_transform(["x"], checkpoint, str(root / "transform_graph"))
    generation = GenerationOptions(
        max_new_tokens=expected_text(request.param)["max_new_tokens"], temperature=0.0, top_k=0
    )
    export_dir = str(root / "model")
    export.export_serving_model(backbone, tft.TFTransformOutput(transform_dir), generation, export_dir)
    return request.param, checkpoint, backbone, export_dir


def test_tokenizers_ids_and_the_framing_rule_are_the_ids_transformers_encoded(served):
    family, checkpoint, _, _ = served
    recorded = expected_text(family)
    special = loaded.load(checkpoint).special
    reference = HfTokenizer.from_file(os.path.join(checkpoint, "tokenizer.json"))
    reference.encode_special_tokens = True
    assert special.prompt_prefix == {"gpt2": (), "llama": (1,)}[family] and special.prompt_suffix == ()
    for row in recorded["rows"]:
        if row["prompt"]:  # the empty prompt is generate() without input ids (it starts from bos)
            ids = reference.encode(row["prompt"], add_special_tokens=False).ids
            assert list(special.prompt_prefix) + ids + list(special.prompt_suffix) == row["input_ids"], row["prompt"]
    assert recorded["eos_token_id"] == special.eos_id == PAIRS[family][1]["eos_token_id"]


def test_the_served_model_generates_what_transformers_generates(served):
    from components.trainer.serving import signatures
    from pipeline import samples

    family, _, _, export_dir = served
    rows = expected_text(family)["rows"]
    assert len(rows) >= 6 and any(row["prompt"] == "" for row in rows)
    prompts = [row["prompt"] for row in rows]
    new_tokens = expected_text(family)["max_new_tokens"]
    # `textgen generate` (pipeline/samples.py) and the evaluator call the model through this client.
    texts = samples.generate(export_dir, prompts, new_tokens, temperature=0.0, top_k=0)
    assert texts == [row["text"] for row in rows]
    counts = samples.open_model(export_dir).call(
        signatures.GENERATE, prompts=prompts, max_new_tokens=new_tokens, temperature=0.0, top_k=0, top_p=1.0, seed=0
    )["num_generated_tokens"]
    assert counts.tolist() == [len(row["generated_ids"]) for row in rows]


@pytest.mark.parametrize("served", ["gpt2"], indirect=True)  # Llama's document and prompt prefix are both <s>
def test_framed_as_a_document_gpt2_would_answer_otherwise(served):
    """The old framing (<|endoftext|> before every prompt) changes GPT-2's greedy continuations."""
    from components.trainer.model import decoding

    family, checkpoint, backbone, _ = served
    special = loaded.load(checkpoint).special
    rows = [row for row in expected_text(family)["rows"] if row["prompt"]]
    prompts = tf.ragged.constant([row["input_ids"] for row in rows], dtype=tf.int64)
    as_documents = special._replace(prompt_prefix=special.document_prefix)
    new, _ = decoding.generate_tokens(
        backbone, prompts, len(rows[0]["generated_ids"]), 0.0, 0, 1.0, 0, special=as_documents
    )
    assert sum(ours != row["generated_ids"] for ours, row in zip(new.to_list(), rows)) >= 1
    framed, _ = decoding.generate_tokens(
        backbone, prompts, len(rows[0]["generated_ids"]), 0.0, 0, 1.0, 0, special=special
    )
    assert framed.to_list() == [row["generated_ids"] for row in rows]


def _continuation_nll(backbone, context, continuation) -> float:
    ids = tf.constant([context + continuation], tf.int64)
    logits = backbone(ids[:, :-1], training=False)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids[:, 1:], logits=logits)[0].numpy()
    return float(nll[len(context) - 1 :].sum())


def test_score_continuation_scores_after_the_prefix_framed_as_a_prompt(served):
    family, checkpoint, backbone, export_dir = served
    tokenizer = loaded.load(checkpoint)
    reference = HfTokenizer.from_file(os.path.join(checkpoint, "tokenizer.json"))
    reference.encode_special_tokens = True
    prefixes, continuations = ["The team said", ""], [" thanks!", "Hello"]
    result = tf.saved_model.load(export_dir).signatures["score_continuation"](
        prefixes=tf.constant(prefixes), continuations=tf.constant(continuations)
    )
    for index, (prefix, continuation) in enumerate(zip(prefixes, continuations)):
        context = list(tokenizer.special.prompt_prefix) + reference.encode(prefix, add_special_tokens=False).ids
        context = context or [tokenizer.special.bos_id]  # an empty GPT-2 prefix: bos, as for generate
        ids = reference.encode(continuation, add_special_tokens=False).ids
        np.testing.assert_allclose(
            result["nll_sum"].numpy()[index], _continuation_nll(backbone, context, ids), rtol=1e-4
        )
        assert result["num_tokens"].numpy()[index] == len(ids)


def _tokenizer_dir(tmp_path, kind, config_changes=None, post_processor="keep", drop=()):
    directory = tmp_path / f"{kind}-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(os.path.join(FIXTURES, "tokenizers", kind), directory)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config.update(config_changes or {})
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    if post_processor != "keep":
        spec = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
        spec["post_processor"] = post_processor
        (directory / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    for name in drop:
        os.remove(directory / name)
    return str(directory)


BOS_TEMPLATE = {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
}


def test_the_framing_rule(tmp_path):
    def framing(*args, **kwargs):
        found = loaded.load(_tokenizer_dir(tmp_path, *args, **kwargs)).special
        return found.prompt_prefix, found.prompt_suffix

    assert framing("gpt2_bpe") == ((), ())
    assert framing("gpt2_bpe", {"add_bos_token": True}) == ((), ())  # GPT2TokenizerFast ignores it
    assert framing("gpt2_bpe", drop=["tokenizer.json"]) == ((), ())  # vocab.json + merges.txt
    assert framing("llama_sp") == ((1,), ())
    assert framing("llama_sp", {"add_eos_token": True}) == ((1,), (2,))
    assert framing("llama_sp", {"add_bos_token": False, "add_eos_token": True}) == ((), (2,))
    assert framing("llama_sp", {"add_bos_token": False}, drop=["tokenizer.json"]) == ((), ())
    # Any other class applies the tokenizer.json's post-processor, whatever the flags say.
    generic = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False}
    assert framing("llama_sp", generic) == ((), ())
    assert framing("llama_sp", generic, post_processor=BOS_TEMPLATE) == ((1,), ())
    sequence = {"type": "Sequence", "processors": [{"type": "ByteLevel", "trim_offsets": False}, BOS_TEMPLATE]}
    assert framing("llama_sp", generic, post_processor=sequence) == ((1,), ())
    # No tokenizer_class: the class config.json's model_type maps to (LlamaTokenizerFast for llama).
    directory = _tokenizer_dir(tmp_path, "llama_sp", {"tokenizer_class": None})
    assert loaded.load(directory).special.prompt_prefix == ()
    (tmp_path / os.path.basename(directory) / "config.json").write_text(
        json.dumps({"model_type": "llama", "eos_token_id": 2})
    )
    assert loaded.load(directory).special.prompt_prefix == (1,)


def test_an_unsupported_post_processor_is_refused_naming_the_field(tmp_path):
    directory = _tokenizer_dir(
        tmp_path,
        "llama_sp",
        {"tokenizer_class": "PreTrainedTokenizerFast"},
        post_processor={"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]},
    )
    with pytest.raises(ValueError) as error:
        loaded.load(directory)
    assert f"{os.path.join(directory, hf_files.TOKENIZER_JSON)}: unsupported post_processor" in str(error.value)
