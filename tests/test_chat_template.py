"""Chat templates as grammars (components/tokenizer/chat_template.py) and their rendering in the
TF graph (chat_graph.py): the grammar renders every test conversation byte-equal to the Jinja
template, templates that are not fixed texts between turns are refused with the construct named,
and the graph's ids and loss mask equal those of the Python rendering tokenized the same way.

The graph tests tokenize with a stand-in (Unicode code points as ids, the special tokens at ids
from 1,000,000): what is under test is the rendering, the splitting at special tokens and the
mask; the real tokenizers are tested against `tokenizers` and transformers elsewhere
(test_chat_fidelity.py)."""

import pytest

from components.tokenizer import chat_template
from components.tokenizer.chat_template import ChatTemplateError, derive_grammar, render
from tests.chat_templates import CONVERSATIONS, NUMBERED_TURNS, SHOUTING, STYLES, conversation_batch

SPECIAL_BASE = 1_000_000


@pytest.fixture(scope="module", params=sorted(STYLES))
def style(request):
    template, special, variables = STYLES[request.param]
    return request.param, template, derive_grammar(template, special, variables, request.param), variables


def _accepted(grammar, conversation, generation):
    try:
        grammar.check_roles([role for role, _ in conversation], generation)
        return True
    except ChatTemplateError:
        return False


def test_the_grammar_renders_every_test_conversation_as_the_template_does(style):
    name, template, grammar, variables = style
    rendered = 0
    for conversation in CONVERSATIONS:
        for generation in (False, True):
            if not _accepted(grammar, conversation, generation):
                continue
            assert grammar.render(conversation, generation) == render(template, conversation, generation, variables), (
                name,
                conversation,
            )
            rendered += 1
    assert rendered >= 6


def test_the_end_of_turn_token_is_the_special_token_that_closes_a_reply(style):
    name, _, grammar, _ = style
    assert grammar.end_of_turn_tokens() == {"chatml": ["<|im_end|>"], "header": ["<|eot_id|>"], "inst": ["</s>"]}[name]


def test_an_order_of_roles_the_template_refuses_is_refused_by_the_grammar():
    template, special, variables = STYLES["inst"]
    grammar = derive_grammar(template, special, variables)
    with pytest.raises(Exception, match="Conversation roles must alternate"):
        render(template, [("user", "a"), ("user", "b")], True, variables)
    with pytest.raises(ChatTemplateError, match="does not accept a user turn after a user turn"):
        grammar.render([("user", "a"), ("user", "b")], True)
    with pytest.raises(ChatTemplateError, match="unknown role 'tool'"):
        grammar.check_roles(["user", "tool"], True)


@pytest.mark.parametrize(
    "template, construct",
    [(NUMBERED_TURNS, "depends on where it occurs"), (SHOUTING, "depends on the message contents")],
)
def test_a_template_that_is_not_a_fixed_text_between_turns_is_refused_naming_why(template, construct):
    with pytest.raises(ChatTemplateError, match=construct):
        derive_grammar(template, (), {}, "the test template")


def test_a_template_with_a_syntax_error_is_named_with_its_line():
    with pytest.raises(ChatTemplateError, match="my_template: Jinja syntax error at line 2"):
        derive_grammar("{% for m in messages %}\n{{ m['content'] }\n{% endfor %}", (), {}, "my_template")


def test_the_grammar_round_trips_through_json(style):
    _, _, grammar, _ = style
    again = chat_template.ChatGrammar.from_json(grammar.to_json(), "test")
    assert again == grammar


# --- the graph -------------------------------------------------------------------------------


def _reference_ids(grammar, conversation, generation):
    """The Python reference: the grammar's units, special tokens by id, code points for the text."""
    ids = []
    for piece, special in grammar.units(conversation, generation):
        ids += [SPECIAL_BASE + grammar.special_tokens.index(piece)] if special else [ord(c) for c in piece]
    return ids


def _graph(grammar):
    import tensorflow as tf

    from components.tokenizer.chat_graph import ChatGraph

    special_ids = {token: SPECIAL_BASE + index for index, token in enumerate(grammar.special_tokens)}
    return ChatGraph(grammar, special_ids, lambda texts, starts_input: tf.strings.unicode_decode(texts, "UTF-8"))


def test_the_graph_renders_the_generation_prompt_as_the_template_does(style):
    name, template, grammar, variables = style
    conversations = [c for c in CONVERSATIONS if _accepted(grammar, c, True)]
    rendered = _graph(grammar).generation_prompt(*conversation_batch(conversations))
    assert rendered.accepted.numpy().all()
    for row, conversation in enumerate(conversations):
        assert grammar.render(conversation, True) == render(template, conversation, True, variables)
        expected = _reference_ids(grammar, conversation, True)
        assert rendered.token_ids[row].numpy().tolist() == expected, (name, conversation)


def test_the_loss_mask_marks_each_reply_and_its_end_of_turn_token_only(style):
    name, template, grammar, variables = style
    conversations = [c for c in CONVERSATIONS if c[-1][0] == "assistant" and _accepted(grammar, c, False)]
    ids, mask, accepted = _graph(grammar).training_example(*conversation_batch(conversations))
    assert accepted.numpy().all()
    for row, conversation in enumerate(conversations):
        full = _reference_ids(grammar, conversation, False)
        assert ids[row].numpy().tolist() == full
        expected = [0] * len(full)
        for turn, (role, _) in enumerate(conversation):
            if role != "assistant":
                continue
            start = len(_reference_ids(grammar, conversation[:turn], True))
            end = len(_reference_ids(grammar, conversation[: turn + 1], False))
            expected[start:end] = [1] * (end - start)
        assert mask[row].numpy().tolist() == expected, (name, conversation)
        supervised = [token for token, weight in zip(full, expected) if weight]
        end_of_turn = SPECIAL_BASE + grammar.special_tokens.index(grammar.end_of_turn_tokens()[0])
        assert end_of_turn in supervised  # the model learns to stop
        reply_text = "".join(chr(t) for t in supervised if t < SPECIAL_BASE)
        assert conversation[-1][1].strip() in reply_text
        assert conversation[0][1].strip() not in reply_text  # the prompt is never a target


def test_a_conversation_the_template_refuses_gets_no_supervised_token():
    template, special, variables = STYLES["inst"]
    grammar = derive_grammar(template, special, variables)
    ids, mask, accepted = _graph(grammar).training_example(
        *conversation_batch([[("user", "a"), ("user", "b"), ("assistant", "c")], [("user", "a"), ("assistant", "b")]])
    )
    assert accepted.numpy().tolist() == [False, True]
    assert sum(mask[0].numpy()) == 0 and sum(mask[1].numpy()) > 0


def test_typed_special_tokens_stay_text_in_the_graph():
    template, special, variables = STYLES["chatml"]
    grammar = derive_grammar(template, special, variables)
    rendered = _graph(grammar).generation_prompt(*conversation_batch([[("user", "typed <|im_end|> myself")]]))
    ids = rendered.token_ids[0].numpy().tolist()
    end = SPECIAL_BASE + grammar.special_tokens.index("<|im_end|>")
    assert ids.count(end) == 2  # the default system turn's and the user turn's, not the typed one
    assert "".join(chr(i) for i in ids if i < SPECIAL_BASE).count("<|im_end|>") == 1
