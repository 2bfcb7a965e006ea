"""Chat templates against transformers: the pipeline renders and tokenizes a conversation, trains on
it and answers it exactly as transformers does with the same checkpoint.

transformers does not run in the test environment. tests/fixtures/hf/chat/ holds what transformers
4.57.6 did in the reference environment (tests/fixtures/make_chat_fixtures.py): tokenizers with
the three test template styles (tests/chat_templates.py) on byte-level BPE and on SentencePiece-
style tokenizer.json files (legacy, whose Prepend normalizer puts '▁' before every text between
special tokens; and prepend_scheme "first", which puts it only at the very start of the input),
`apply_chat_template`'s text and ids for every test conversation, and two tiny chat checkpoints
with transformers' greedy replies. Here, with the tokenizer read as the Tokenizer stage reads it
(`loaded.load`, `chat_setup.checkpoint_chat_of`):

1. the grammar's rendering is byte-equal to transformers' text, and refuses what the template refuses;
2. ChatGraph's ids (the real tokenizer graph) equal transformers' ids, in the graph alone, in
   Transform's `preprocessing_fn` (the conversation branch) and in the `chat` signature;
3. the deliberate difference: a content that spells a special token gets those characters as text,
   where transformers makes the control token;
4. the served model's `chat` signature and `textgen generate --chat/--system/--messages` answer
   with transformers' greedy tokens and stop at the end-of-turn token; `score_replies` scores the
   reply tokens of transformers' ids;
5. the Hugging Face export carries the checkpoint's template and stop ids as transformers reads them.
"""

import functools
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tokenizers import Tokenizer as HfTokenizer

from components.tokenizer import chat_setup, hf_files, loaded
from components.tokenizer.chat_graph import ChatGraph
from components.tokenizer.chat_template import TEMPLATE_FILE, ChatTemplateError, read_checkpoint_template
from tests.chat_templates import TEMPLATES_BY_STYLE, conversation_batch
from tests.hf_checkpoints import FIXTURES

CHAT = os.path.join(FIXTURES, "chat")
# chat checkpoint -> (its tokenizer among the fixture's tokenizers, the template's end-of-turn token)
CHECKPOINTS = {"gpt2-chatml": ("chatml-gpt2_bpe", "<|im_end|>"), "llama-header": ("header-llama_sp", "<|eot_id|>")}


@functools.lru_cache(maxsize=None)
def _rendering() -> dict:
    with open(os.path.join(CHAT, "expected_rendering.json"), encoding="utf-8") as handle:
        return json.load(handle)


TOKENIZERS = sorted(_rendering()["tokenizers"])


def _tokenizer_dir(name: str) -> str:
    return os.path.join(CHAT, "tokenizers", name)


def _conversation(case: dict):
    return [tuple(turn) for turn in case["conversation"]]


def _cases(name: str, accepted=True, typed=False):
    """The fixture's cases of tokenizer `name`: rendered (accepted) or refused; with or without
    contents that spell one of its special tokens."""
    for case in _rendering()["cases"]:
        if case["tokenizer"] != name or ("refused" not in case) != accepted:
            continue
        if accepted and bool(case["typed_special_tokens"]) != typed:
            continue
        yield case


@functools.lru_cache(maxsize=None)
def _chat(name: str):
    """(loaded tokenizer, its ChatSpec as the Tokenizer stage derives it, its ChatGraph)."""
    directory = _tokenizer_dir(name) if name in TOKENIZERS else os.path.join(CHAT, name)
    tokenizer = loaded.load(directory)
    spec = chat_setup.checkpoint_chat_of(tokenizer, directory)
    return tokenizer, spec, ChatGraph(spec.grammar, spec.special_ids, tokenizer.graph().tokenize)


def _graph_ids(graph: ChatGraph, cases):
    """ChatGraph's ids for `cases`, each with its own generation prompt flag."""
    cases = list(cases)
    roles, contents = conversation_batch([_conversation(case) for case in cases])
    turns = tf.constant([len(case["conversation"]) for case in cases], tf.int64)
    generation = tf.constant([case["add_generation_prompt"] for case in cases])
    rendered = graph.render(roles, contents, turns, generation)
    assert rendered.accepted.numpy().all()
    return rendered.token_ids.to_list()


# --- 1. the rendered text ------------------------------------------------------------------------


@pytest.mark.parametrize("name", TOKENIZERS)
def test_the_template_is_the_one_transformers_reads(name):
    source = read_checkpoint_template(_tokenizer_dir(name))
    recorded = _rendering()["tokenizers"][name]
    expected_file = (
        TEMPLATE_FILE if recorded["template_file"] == TEMPLATE_FILE else "tokenizer_config.json:chat_template"
    )
    assert source.origin.endswith(expected_file)
    assert source.text == TEMPLATES_BY_STYLE[recorded["style"]]


@pytest.mark.parametrize("name", TOKENIZERS)
def test_the_rendered_text_is_byte_equal_to_transformers(name):
    _, spec, _ = _chat(name)
    cases = [case for typed in (False, True) for case in _cases(name, typed=typed)]
    assert len(cases) >= 12
    for case in cases:
        if case["text"] == "":
            continue  # the [INST] template drops a lone system turn: test_a_template_that_drops_a_content_is_refused
        assert spec.grammar.render(_conversation(case), case["add_generation_prompt"]) == case["text"], case


@pytest.mark.parametrize("name", TOKENIZERS)
def test_what_the_template_refuses_is_refused(name):
    _, spec, _ = _chat(name)
    for case in _cases(name, accepted=False):
        with pytest.raises(ChatTemplateError, match="does not accept"):
            spec.grammar.render(_conversation(case), case["add_generation_prompt"])
    refused = sum(1 for _ in _cases(name, accepted=False))
    assert refused == (4 if _rendering()["tokenizers"][name]["style"] == "inst" else 0)


def test_the_template_variables_are_the_tokens_the_tokenizer_files_name(tmp_path):
    """transformers fills `bos_token` from the tokenizer's files (tokenizer_config.json), not from
    config.json's ids: a Llama base whose config.json still says bos_token_id 1 (<s>) under a chat
    tokenizer whose bos_token is <|begin_of_text|> renders <|begin_of_text|>. And a token the files
    do not name (GPT-2's pad_token) is undefined, not the pad id's token."""
    import shutil

    directory = tmp_path / "llama-header"
    shutil.copytree(os.path.join(CHAT, "llama-header"), directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "bos_token_id": 1}))
    tokenizer = loaded.load(str(directory))
    assert tokenizer.special.bos_id == 1
    spec = chat_setup.checkpoint_chat_of(tokenizer, str(directory))
    cases = list(_cases("header-llama_sp"))
    assert cases and all(case["text"].startswith("<|begin_of_text|>") for case in cases)
    for case in cases:
        assert spec.grammar.render(_conversation(case), case["add_generation_prompt"]) == case["text"]
    gpt2 = loaded.load(_tokenizer_dir("chatml-gpt2_bpe"))
    assert gpt2.special.pad_id is not None
    assert chat_setup.template_variables(gpt2, _tokenizer_dir("chatml-gpt2_bpe")) == {
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
    }


def test_the_jinja_environment_has_transformers_extras():
    """{% generation %} blocks render their body (the chatml_generation fixtures check it against
    transformers); strftime_now gives the local date, as transformers' global does."""
    import datetime

    from components.tokenizer.chat_template import render

    template = "{% for m in messages %}{% generation %}{{ m['content'] }}{% endgeneration %}{% endfor %}{{ strftime_now('%Y') }}"
    assert render(template, [("user", "a"), ("assistant", "b")], False) == "ab" + str(datetime.date.today().year)


def test_a_template_that_drops_a_content_is_refused():
    """The [INST] template folds the system turn into the first user turn: a lone system turn
    renders as nothing in transformers, its content silently gone. The grammar refuses it."""
    dropped = [case for case in _rendering()["cases"] if case["style"] == "inst" and case.get("text") == ""]
    assert len(dropped) == 6 and all(case["conversation"] == [["system", "Only a system turn."]] for case in dropped)
    for case in dropped:
        _, spec, _ = _chat(case["tokenizer"])
        with pytest.raises(
            ChatTemplateError,
            match="does not accept the (end of the conversation|generation prompt) after a system turn",
        ):
            spec.grammar.render(_conversation(case), case["add_generation_prompt"])


# --- 2. the ids ----------------------------------------------------------------------------------


def _comparable(name):
    """Cases whose ids must equal transformers': accepted, no typed special token, not dropped."""
    return [case for case in _cases(name) if case["text"]]


@pytest.mark.parametrize("name", TOKENIZERS)
def test_the_graph_ids_equal_transformers(name):
    _, _, graph = _chat(name)
    cases = _comparable(name)
    assert len(cases) >= 10
    for case, ids in zip(cases, _graph_ids(graph, cases)):
        assert ids == case["ids"], (case["conversation"], case["add_generation_prompt"])


@pytest.mark.parametrize("name", ["chatml-llama_sp_first", "header-llama_sp_first", "inst-llama_sp_first"])
def test_prepend_scheme_first_puts_no_space_symbol_after_a_special_token(name):
    """The case the per-text tokenizing got wrong: a Metaspace pre-tokenizer with prepend_scheme
    "first" prepends '▁' only to the input's first text, and a rendering starts with a special token."""
    tokenizer, _, graph = _chat(name)
    assert tokenizer.kind == loaded.SENTENCEPIECE_BPE
    space = tokenizer._vocabulary().vocab["\u2581"]
    case = next(case for case in _comparable(name) if len(case["conversation"]) == 1)
    text_ids = tokenizer.graph().tokenize(tf.constant(["user"]), tf.constant([False]))
    assert space not in text_ids[0].numpy().tolist() and "\u2581" not in case["text"]
    assert _graph_ids(graph, [case])[0] == case["ids"]
    prefixed = tokenizer.graph().tokenize(tf.constant(["user"]))  # a whole text begins the input
    assert prefixed[0].numpy().tolist() != text_ids[0].numpy().tolist()


def _stage_dir(name: str, tmp_path) -> str:
    """The tokenizer directory the Tokenizer stage writes for conversation data (component.py:
    the tokenizer's files, its special ids, then the chat template and grammar)."""
    tokenizer, spec, _ = _chat(name)
    directory = str(tmp_path / name)
    tokenizer.write(directory)
    for file_name, data in spec.files().items():
        with open(os.path.join(directory, file_name), "wb") as handle:
            handle.write(data)
    return directory


@pytest.mark.parametrize("name", ["chatml-gpt2_bpe", "header-llama_sp", "inst-llama_sp_first"])
def test_transform_renders_conversations_with_transformers_ids(name, tmp_path):
    """Transform's preprocessing_fn (its conversation branch; raw features as the VarLenFeatures
    it parses) on the tokenizer directory the stage writes, run eagerly (traced, it takes 15-20 s
    here; ChatGraph in a graph is what the export tests below run)."""
    from components.transform import preprocessing

    directory = _stage_dir(name, tmp_path)
    cases = [case for case in _comparable(name) if not case["add_generation_prompt"]]
    conversations = [_conversation(case) for case in cases]
    roles = tf.ragged.constant([[role for role, _ in c] for c in conversations]).to_sparse()
    contents = tf.ragged.constant([[content for _, content in c] for c in conversations]).to_sparse()
    outputs = preprocessing.preprocessing_fn(
        {preprocessing.ROLES_KEY: roles, preprocessing.CONTENTS_KEY: contents},
        {preprocessing.TOKENIZER_MODEL_KEY: directory},
    )
    assert outputs[preprocessing.TOKEN_IDS_KEY].to_list() == [case["ids"] for case in cases]
    assert outputs[preprocessing.TEMPLATE_ACCEPTED_KEY].numpy().tolist() == [1] * len(cases)
    assert outputs[preprocessing.SPECIAL_TOKENS_KEY].numpy().tolist() == [0] * len(cases)
    replies = [any(role == "assistant" for role, _ in c) for c in conversations]
    assert [bool(n) for n in outputs[preprocessing.SUPERVISED_TOKENS_KEY].numpy()] == replies


# --- 3. the deliberate difference ------------------------------------------------------------------


def test_a_typed_special_token_stays_text_where_transformers_makes_it_the_control_token():
    """ChatML on GPT-2's tokenizer, a user who types <|im_end|>: transformers' ids hold one
    <|im_end|> more than the template writes, ours hold its characters."""
    _, spec, graph = _chat("chatml-gpt2_bpe")
    case = next(case for case in _cases("chatml-gpt2_bpe", typed=True) if case["add_generation_prompt"])
    assert case["typed_special_tokens"] == ["<|im_end|>"]
    end = spec.special_ids["<|im_end|>"]
    ours = _graph_ids(graph, [case])[0]
    turns = len(case["conversation"]) + 1  # and the default system turn
    assert case["ids"].count(end) == turns + 1 and ours.count(end) == turns
    decoder = HfTokenizer.from_file(os.path.join(_tokenizer_dir("chatml-gpt2_bpe"), hf_files.TOKENIZER_JSON))
    typed = case["conversation"][-1][1]
    assert typed in decoder.decode(ours, skip_special_tokens=True)
    assert typed not in decoder.decode(case["ids"], skip_special_tokens=True)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_every_typed_special_token_stays_text(name):
    _, spec, graph = _chat(name)
    cases = list(_cases(name, typed=True))
    decoder = HfTokenizer.from_file(os.path.join(_tokenizer_dir(name), hf_files.TOKENIZER_JSON))
    special = set(decoder.get_added_tokens_decoder())
    for case, ours in zip(cases, _graph_ids(graph, cases) if cases else []):
        typed = sum(
            content.count(token) for _, content in case["conversation"] for token in case["typed_special_tokens"]
        )
        assert sum(i in special for i in case["ids"]) == sum(i in special for i in ours) + typed
        for _, content in case["conversation"]:
            if any(token in content for token in case["typed_special_tokens"]):
                assert content in decoder.decode(ours, skip_special_tokens=True)
    kind = _rendering()["tokenizers"][name]["kind"]
    style = _rendering()["tokenizers"][name]["style"]
    # </s> is special in the SentencePiece tokenizers; <|im_end|> where the template adds it.
    assert bool(cases) == (kind != "gpt2_bpe" or style.startswith("chatml") or style == "inst")


# --- 4. the served chat model --------------------------------------------------------------------


def _generations(name: str) -> dict:
    with open(os.path.join(CHAT, name, "expected_generations.json"), encoding="utf-8") as handle:
        return json.load(handle)


# The Llama export's tests are marked slow (about 60 s more); the GPT-2 one runs in the fast suite.
@pytest.fixture(scope="module", params=["gpt2-chatml", pytest.param("llama-header", marks=pytest.mark.slow)])
def served(request, tmp_path_factory):
    """(name, checkpoint, backbone, ChatSpec, exported SavedModel, its client) of a chat checkpoint,
    weights unchanged, exported as run_fn exports a conversation model (the transform graph is built
    from one text: the export reads the tokenizer from it; the chat signature renders with ChatGraph)."""
    import tensorflow_transform as tft

    from components.trainer.checkpoint.hf_weights import import_checkpoint
    from components.trainer.options import GenerationOptions
    from components.trainer.serving import export
    from components.transform.standalone import analyze_and_transform
    from pipeline import samples

    name = request.param
    root = tmp_path_factory.mktemp(name)
    checkpoint = os.path.join(CHAT, name)
    backbone, _ = import_checkpoint(checkpoint)
    _, spec, _ = _chat(name)
    tokenizer_dir = _stage_dir(name, root)
    transform_dir = analyze_and_transform(["x"], tokenizer_dir, str(root / "transform_graph"))
    generation = GenerationOptions(max_new_tokens=_generations(name)["max_new_tokens"], temperature=0.0, top_k=0)
    export_dir = str(root / "model")
    export.export_serving_model(backbone, tft.TFTransformOutput(transform_dir), generation, export_dir)
    return name, checkpoint, backbone, spec, export_dir, samples.open_model(export_dir)


def _rows(name: str):
    """The recorded generations of checkpoint `name`, keyed by conversation (tuples)."""
    return {tuple(tuple(turn) for turn in row["conversation"]): row for row in _generations(name)["rows"]}


def test_the_stop_ids_are_generation_configs_eos_ids(served):
    name, _, _, spec, _, _ = served
    eos = _generations(name)["eos_token_id"]
    assert sorted(spec.stop_token_ids) == sorted(eos)
    assert spec.end_of_turn_ids == (spec.special_ids[CHECKPOINTS[name][1]],)


def test_the_chat_prompt_and_greedy_reply_are_transformers_tokens(served):
    """ChatGraph's generation prompt is transformers' prompt ids, and greedy decoding from it with
    the spec's stop ids gives transformers' reply ids, the end-of-turn token included."""
    from components.trainer.model import decoding

    name, checkpoint, backbone, spec, _, _ = served
    rows = _generations(name)["rows"]
    graph = _chat(name)[2]
    prompt = graph.generation_prompt(*conversation_batch([[tuple(t) for t in row["conversation"]] for row in rows]))
    assert prompt.token_ids.to_list() == [row["prompt_ids"] for row in rows]
    unframed = loaded.load(checkpoint).special._replace(prompt_prefix=(), prompt_suffix=())
    new, _ = decoding.generate_tokens(
        backbone,
        prompt.token_ids,
        _generations(name)["max_new_tokens"],
        0.0,
        0,
        1.0,
        0,
        special=unframed,
        stop_ids=spec.stop_token_ids,
    )
    assert new.to_list() == [row["generated_ids"] for row in rows]
    assert any(row["stopped"] for row in rows) and not all(row["stopped"] for row in rows)


def test_the_chat_signature_answers_as_transformers(served):
    """All recorded conversations in one batch: replies that stop at the end-of-turn token (one of
    them at the last allowed token) beside replies cut at the limit."""
    name, _, _, _, _, client = served
    recorded = _generations(name)
    rows = recorded["rows"]
    replies = client.chat(
        [[tuple(t) for t in row["conversation"]] for row in rows], recorded["max_new_tokens"], temperature=0.0, top_k=0
    )
    assert [reply.text for reply in replies] == [row["text"] for row in rows]
    assert [reply.num_tokens for reply in replies] == [len(row["generated_ids"]) for row in rows]
    assert [reply.stopped for reply in replies] == [row["stopped"] for row in rows]


def test_the_export_declares_the_signature_contract_with_the_chat_signatures(served):
    from components.trainer.serving import signatures
    from tests.test_serving_requests import assert_signature_contract

    client = served[-1]
    assert_signature_contract(client._model, set(signatures.INPUTS))  # the SavedModel the client loaded


def test_the_rest_bodies_of_the_chat_signatures_are_what_tf_serving_reads(served):
    """`rest_request_body` writes [batch, turns] roles and contents as JSON lists of lists of text
    (padding "" after a shorter conversation); read as TF Serving's REST API reads them, they
    answer as the gRPC request does."""
    from components.trainer.serving import signatures
    from tests.test_serving_requests import assert_rest_body_runs_as_the_grpc_request

    model = served[-1]._model
    roles = [["system", "user"], ["user", ""]]
    contents = [["You answer support tickets.", "Where is my order?"], ["Hi Zoë", ""]]
    sampling = dict(max_new_tokens=4, temperature=0.0, top_k=0, top_p=1.0, seed=0)
    body = assert_rest_body_runs_as_the_grpc_request(model, signatures.CHAT, roles=roles, contents=contents, **sampling)
    assert body == {"signature_name": "chat", "inputs": {"roles": roles, "contents": contents, **sampling}}
    roles = [["user", "assistant"]]
    contents = [["Where is my order?", "It ships today."]]
    body = assert_rest_body_runs_as_the_grpc_request(model, signatures.SCORE_REPLIES, roles=roles, contents=contents)
    assert body["inputs"] == {"roles": roles, "contents": contents}


def test_the_warmup_records_of_a_chat_model_warm_the_chat_signature(served):
    """A chat model's first `chat` request is not cold: its warm-up file has a sampled `chat`
    request after the text signatures' ones, and the model accepts and answers it."""
    from components.trainer.serving import predict_requests

    export_dir, client = served[-2:]
    requests = predict_requests.read_warmup_file(export_dir)
    names = [request.model_spec.signature_name for request in requests]
    assert names == ["serving_default", "serving_default", "generate", "score", "chat"]
    outputs = predict_requests.run_request(client._model, requests[-1])
    assert outputs["accepted"].tolist() == [True] and outputs["num_generated_tokens"][0] >= 1


def test_the_chat_signature_refuses_what_the_template_refuses(served):
    """transformers raises for a conversation its template refuses; the signature answers such a
    row with accepted false and no reply (it rendered it with the boundaries it has before), and
    the client raises naming it."""
    from components.trainer.serving import signatures

    name, _, _, _, _, client = served
    result = client.call(
        signatures.CHAT,
        roles=[["user", ""], ["tool", "user"]],
        contents=[["Hi", ""], ["{}", "Hi"]],
        max_new_tokens=4,
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        seed=0,
    )
    assert result["accepted"].tolist() == [True, False]
    assert result["num_generated_tokens"].tolist()[1] == 0 and result["generations"][1] == b""
    assert not result["stopped"][1] and result["num_generated_tokens"][0] > 0
    with pytest.raises(ValueError, match="refuses conversation 1 of the batch .roles tool, user."):
        client.chat([[("user", "Hi")], [("tool", "{}"), ("user", "Hi")]], 4, temperature=0.0)


def test_textgen_generate_chat_answers_as_transformers(served, tmp_path, capsys):
    """`textgen generate` in this process: --chat with --system on the GPT-2 model, --messages
    (a multi-turn conversation) on the Llama one."""
    from textgen_cli.cli import main

    name, _, _, _, export_dir, _ = served
    rows = _rows(name)
    if name == "gpt2-chatml":
        conversation = next(c for c in rows if c[0][0] == "system")
        arguments = ["--chat", "--system", conversation[0][1], conversation[1][1]]
    else:
        conversation = next(c for c in rows if len(c) == 3)
        messages = tmp_path / "messages.json"
        messages.write_text(
            json.dumps([{"role": role, "content": content} for role, content in conversation]), encoding="utf-8"
        )
        arguments = ["--messages", str(messages)]
    flags = [
        "--max-new-tokens",
        str(_generations(name)["max_new_tokens"]),
        "--temperature",
        "0",
        "--top-k",
        "0",
        "--json",
    ]
    assert main(["generate", "--model", export_dir, *flags, *arguments]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    row = rows[conversation]
    assert [(line["reply"], line["num_tokens"], line["stopped"]) for line in printed] == [
        (row["text"], len(row["generated_ids"]), row["stopped"])
    ]
    assert printed[0]["messages"] == [{"role": role, "content": content} for role, content in conversation]


def test_textgen_generate_messages_answers_each_conversation_of_a_json_lines_file(served, tmp_path, capsys):
    """--messages with a .jsonl file in the training data's record form (a bare list on another
    line): one reply per conversation, in order, from one call, each transformers' greedy reply."""
    from textgen_cli.cli import main

    name, _, _, _, export_dir, _ = served
    rows = _rows(name)
    conversations = list(rows)[:3]
    lines = tmp_path / "conversations.jsonl"
    records = [
        {"messages": [{"role": role, "content": content} for role, content in conversation], "id": number}
        if number % 2 == 0
        else [{"role": role, "content": content} for role, content in conversation]
        for number, conversation in enumerate(conversations)
    ]
    lines.write_text("\n".join(json.dumps(record) for record in records) + "\n", encoding="utf-8")
    flags = ["--max-new-tokens", str(_generations(name)["max_new_tokens"]), "--temperature", "0", "--top-k", "0"]
    assert main(["generate", "--model", export_dir, *flags, "--json", "--messages", str(lines)]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [[(m["role"], m["content"]) for m in line["messages"]] for line in printed] == [
        list(c) for c in conversations
    ]
    assert [(line["reply"], line["stopped"]) for line in printed] == [
        (rows[c]["text"], rows[c]["stopped"]) for c in conversations
    ]


def test_score_replies_scores_the_reply_tokens_of_transformers_ids(served):
    """The reply of a conversation: the tokens between its prompt (transformers' ids with the
    generation prompt) and the conversation's end (transformers' ids without), end-of-turn included."""
    name, _, backbone, _, _, client = served
    cases = {
        (tuple(map(tuple, case["conversation"])), case["add_generation_prompt"]): case["ids"]
        for case in _comparable(CHECKPOINTS[name][0])
    }
    conversation = next(c for c, generation in cases if not generation and len(c) == 2 and c[1][0] == "assistant")
    full, prompt = cases[(conversation, False)], cases[(conversation[:1], True)]
    assert full[: len(prompt)] == prompt
    ids = tf.constant([full], tf.int64)
    logits = backbone(ids[:, :-1], training=False)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids[:, 1:], logits=logits)[0].numpy()
    expected = float(nll[len(prompt) - 1 :].sum())  # targets full[len(prompt):], the reply and its end of turn
    scores = client.score_replies([list(conversation)])
    assert int(scores.num_tokens[0]) == len(full) - len(prompt)
    np.testing.assert_allclose(scores.nll_sum[0], expected, rtol=1e-4)


# --- 5. the Hugging Face export --------------------------------------------------------------------


def test_the_hugging_face_export_carries_the_template_and_stop_ids_transformers_uses(served, tmp_path):
    from components.trainer.checkpoint.hf_export import export_hugging_face

    name, checkpoint, backbone, spec, _, _ = served
    exported = export_hugging_face(backbone, checkpoint, str(tmp_path / "hf"), chat=spec)
    template = read_checkpoint_template(checkpoint).text
    # transformers >= 4.5x reads chat_template.jinja before tokenizer_config.json's chat_template.
    with open(os.path.join(exported, TEMPLATE_FILE), encoding="utf-8") as handle:
        assert handle.read() == template
    with open(os.path.join(exported, "tokenizer_config.json"), encoding="utf-8") as handle:
        assert json.load(handle).get("chat_template") in (None, template)
    with open(os.path.join(checkpoint, "generation_config.json"), encoding="utf-8") as handle:
        original = json.load(handle)
    with open(os.path.join(exported, "generation_config.json"), encoding="utf-8") as handle:
        written = json.load(handle)
    assert written == original  # the checkpoint already stops at its end-of-turn token
    again = loaded.load(exported)
    assert chat_setup.checkpoint_chat_of(again, exported) == spec
