"""Conversations to token ids inside a TF graph, with a `ChatGrammar` (chat_template.py).

Used by Transform (training data: ids and the loss mask) and by the exported `chat` signature
(serving: the generation prompt), so both render a conversation the same way, with string ops
stock TF Serving has, no Jinja.

A conversation is `roles` and `contents`, [batch, turns] strings, an empty role marking padding
after the last turn. It is rendered as the grammar says: the literal of each boundary between
turns (split into text and special-token items), each content in between (whitespace stripped
on a side where the template strips it). The text between two special tokens is tokenized as one
piece with the tokenizer, the way Hugging Face tokenizes a rendered template (special tokens
first, the text between them with the model), and the tokenizer is told whether that text begins
the rendering (a Metaspace pre-tokenizer with prepend_scheme `first` puts its '▁' only there);
contents never become special tokens.

The loss mask marks the tokens a reply is trained on: for each assistant turn k, the tokens of
the conversation up to and including that turn (ending as a conversation ends, so with the
template's end-of-turn token) that are not tokens of the conversation before it ending in the
generation prompt. Rendering both prefixes and counting their tokens works for any template; a
conversation whose rendered prefixes are not prefixes of its tokens (a tokenizer that merges
across the end of the generation prompt) is caught by the Tokenizer stage's check, which compares
this graph with the template on a sample.
"""

from typing import Callable, Dict, NamedTuple

import numpy as np
import tensorflow as tf

from components.tokenizer.chat_template import END, GEN, ROLES, START, ChatGrammar

_PREVIOUS = (*ROLES, START)  # boundary rows: the role before it (3: the start)
_FOLLOWING = (*ROLES, END, GEN)  # boundary columns: the role after it (3: the end, 4: the generation prompt)
_START_ROW, _END_COLUMN, _GEN_COLUMN = 3, 3, 4
# Python's str.strip() whitespace (Jinja's `trim`), which RE2's \s (ASCII only) does not cover.
_WHITESPACE = "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}]"
_NO_TOKEN = -1


class RenderedConversations(NamedTuple):
    """Token ids per conversation ([batch, (tokens)] int64) and whether the template accepts its
    order of roles ([batch] bool; a refused conversation's ids are those of its accepted boundaries)."""

    token_ids: tf.RaggedTensor
    accepted: tf.Tensor


class ChatGraph(tf.Module):
    """Renders and tokenizes conversations (module docstring)."""

    def __init__(
        self,
        grammar: ChatGrammar,
        special_ids: Dict[str, int],
        tokenize: Callable[[tf.Tensor, tf.Tensor], tf.RaggedTensor],
        name: str = "chat_graph",
    ):
        """`tokenize(texts [n], starts_input [n] bool) -> ragged ids`: a tokenizer graph's
        `tokenize` (loaded.LoadedTokenizer.graph()); `starts_input` says which texts begin the rendering."""
        super().__init__(name=name)
        missing = [token for token in grammar.special_tokens if token not in special_ids]
        if missing:
            raise ValueError(f"the tokenizer has no id for the chat template's special tokens {missing}")
        self._tokenize = tokenize
        rows, columns = len(_PREVIOUS), len(_FOLLOWING)
        item_texts, item_ids, item_counts = [], [], []
        allowed = np.zeros([rows, columns], bool)
        strips_previous = np.zeros([rows, columns], bool)
        strips_next = np.zeros([rows, columns], bool)
        for row, previous in enumerate(_PREVIOUS):
            for column, following in enumerate(_FOLLOWING):
                boundary = grammar.boundaries.get((previous, following))
                items = grammar.items(boundary.text) if boundary else []
                if boundary:
                    allowed[row, column] = True
                    strips_previous[row, column] = boundary.strips_previous
                    strips_next[row, column] = boundary.strips_next
                item_texts += ["" if special else piece for piece, special in items]
                item_ids += [special_ids[piece] if special else _NO_TOKEN for piece, special in items]
                item_counts.append(len(items))
        self._boundary_texts = tf.RaggedTensor.from_row_lengths(
            tf.constant(item_texts, tf.string, shape=[len(item_texts)]), tf.constant(item_counts, tf.int64)
        )
        self._boundary_ids = tf.RaggedTensor.from_row_lengths(
            tf.constant(item_ids, tf.int64, shape=[len(item_ids)]), tf.constant(item_counts, tf.int64)
        )
        self._allowed = tf.constant(allowed.reshape(-1))
        self._strips_previous = tf.constant(strips_previous.reshape(-1))
        self._strips_next = tf.constant(strips_next.reshape(-1))

    # --- rendering ----------------------------------------------------------------------------
    @staticmethod
    def role_ids(roles: tf.Tensor) -> tf.Tensor:
        """[batch, turns] role strings -> ids (0 system, 1 user, 2 assistant, -1 padding or unknown)."""
        ids = tf.fill(tf.shape(roles), tf.constant(-1, tf.int64))
        for index, role in enumerate(ROLES):
            ids = tf.where(tf.equal(roles, role), tf.constant(index, tf.int64), ids)
        return ids

    def render(
        self, roles: tf.Tensor, contents: tf.Tensor, turns: tf.Tensor, generation_prompt: tf.Tensor
    ) -> RenderedConversations:
        """Token ids of each conversation's first `turns` [batch] turns, ending in the generation
        prompt where `generation_prompt` [batch] bool, else as a conversation ends."""
        role_ids = self.role_ids(roles)
        turns = tf.cast(turns, tf.int64)
        batch = tf.shape(role_ids, out_type=tf.int64)[0]
        width = tf.shape(role_ids, out_type=tf.int64)[1]
        in_conversation = tf.range(width)[tf.newaxis, :] < turns[:, tf.newaxis]
        known = tf.reduce_all(tf.logical_not(in_conversation) | (role_ids >= 0), axis=1)
        # Boundaries: previous role (START first) x following role (END or GEN last), turns + 1 per row.
        previous = tf.concat([tf.fill([batch, 1], tf.constant(_START_ROW, tf.int64)), role_ids], axis=1)
        terminal = tf.where(generation_prompt, tf.constant(_GEN_COLUMN, tf.int64), tf.constant(_END_COLUMN, tf.int64))
        following = tf.concat([role_ids, tf.zeros([batch, 1], tf.int64)], axis=1)
        following = tf.tensor_scatter_nd_update(following, tf.stack([tf.range(batch), turns], axis=1), terminal)
        boundary = tf.maximum(previous, 0) * len(_FOLLOWING) + tf.maximum(following, 0)
        boundary = tf.RaggedTensor.from_tensor(boundary, lengths=turns + 1)
        accepted = known & tf.reduce_all(tf.gather(self._allowed, boundary), axis=1)
        # Contents, stripped where the template strips them.
        content = tf.RaggedTensor.from_tensor(contents, lengths=turns)
        before = boundary[:, :-1]
        after = boundary[:, 1:]
        content = tf.ragged.map_flat_values(
            lambda text, left, right: _strip(text, left, right),
            content,
            tf.gather(self._strips_next, before),
            tf.gather(self._strips_previous, after),
        )
        # Items in order: boundary 0, content 0, boundary 1, ..., boundary n.
        boundary_texts = tf.gather(self._boundary_texts, boundary)  # [batch, (slots), (items)]
        boundary_ids = tf.gather(self._boundary_ids, boundary)
        content_texts = tf.expand_dims(content, axis=2)  # [batch, (turns), 1]
        content_ids = tf.ragged.map_flat_values(
            lambda t: tf.fill(tf.shape(t), tf.constant(_NO_TOKEN, tf.int64)), content_texts
        )
        order = _interleaving(turns)
        texts = tf.gather(tf.concat([boundary_texts, content_texts], axis=1), order, batch_dims=1).merge_dims(1, 2)
        ids = tf.gather(tf.concat([boundary_ids, content_ids], axis=1), order, batch_dims=1).merge_dims(1, 2)
        return RenderedConversations(self._tokenize_items(texts, ids), accepted)

    def _tokenize_items(self, texts: tf.RaggedTensor, ids: tf.RaggedTensor) -> tf.RaggedTensor:
        """Items [batch, (items)] (text, or a special id) -> token ids [batch, (tokens)]: the text
        between two special tokens is tokenized as one piece."""
        special = ids.flat_values >= 0
        row_starts = ids.row_starts()
        item_row = ids.value_rowids()
        position = tf.range(tf.size(special, out_type=tf.int64)) - tf.gather(row_starts, item_row)
        previous_special = tf.concat([[True], special[:-1]], axis=0)
        starts_unit = (position == 0) | special | previous_special
        unit = tf.cumsum(tf.cast(starts_unit, tf.int64)) - 1  # global unit index of each item
        units = tf.reduce_max(tf.concat([unit, [-1]], axis=0)) + 1
        unit_text = tf.strings.unsorted_segment_join(tf.where(special, "", texts.flat_values), unit, units)
        unit_special = tf.math.unsorted_segment_max(tf.where(special, ids.flat_values, _NO_TOKEN), unit, units)
        unit_row = tf.math.unsorted_segment_max(item_row, unit, units)
        is_special = unit_special >= 0
        starts_input = tf.equal(tf.math.unsorted_segment_min(position, unit, units), 0) & tf.logical_not(is_special)
        tokens = tf.cast(self._tokenize(unit_text, starts_input), tf.int64)
        special_tokens = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(unit_special, is_special), tf.cast(is_special, tf.int64)
        )
        text_tokens = tf.ragged.boolean_mask(
            tokens, tf.ones_like(tokens, tf.bool) & tf.logical_not(is_special)[:, tf.newaxis]
        )
        per_unit = tf.concat([text_tokens, special_tokens], axis=1)
        units_per_row = tf.math.bincount(unit_row, minlength=ids.nrows(), maxlength=ids.nrows(), dtype=tf.int64)
        return tf.RaggedTensor.from_row_lengths(per_unit, units_per_row).merge_dims(1, 2)

    # --- what Transform and the `chat` signature call ---------------------------------------
    def generation_prompt(self, roles: tf.Tensor, contents: tf.Tensor) -> RenderedConversations:
        """The ids a model continues from to answer each conversation (its turns, then the
        generation prompt); padding turns (empty role) after the last turn are ignored."""
        turns = _turn_counts(roles)
        return self.render(roles, contents, turns, tf.ones_like(turns, tf.bool))

    def training_example(self, roles: tf.Tensor, contents: tf.Tensor):
        """(token ids [batch, (tokens)], loss mask [batch, (tokens)] int64 0/1, accepted [batch])
        of whole conversations (module docstring: which tokens the mask marks)."""
        role_ids = self.role_ids(roles)
        turns = _turn_counts(roles)
        full = self.render(roles, contents, turns, tf.zeros_like(turns, tf.bool))
        width = tf.shape(role_ids, out_type=tf.int64)[1]
        is_reply = (role_ids == ROLES.index("assistant")) & (tf.range(width)[tf.newaxis, :] < turns[:, tf.newaxis])
        reply = tf.where(is_reply)  # [replies, 2]: (conversation, turn)
        conversation, turn = reply[:, 0], reply[:, 1]
        replied_roles, replied_contents = tf.gather(roles, conversation), tf.gather(contents, conversation)
        prompt = self.render(replied_roles, replied_contents, turn, tf.ones_like(turn, tf.bool)).token_ids.row_lengths()
        answered = self.render(
            replied_roles, replied_contents, turn + 1, tf.zeros_like(turn, tf.bool)
        ).token_ids.row_lengths()
        positions = tf.ragged.range(full.token_ids.row_lengths())  # [batch, (tokens)]
        # Per token: inside [prompt, answered) of any reply of its conversation.
        token_conversation = positions.value_rowids()
        flat_positions = positions.flat_values
        replies_of = tf.RaggedTensor.from_value_rowids(
            tf.range(tf.size(conversation, out_type=tf.int64)), conversation, nrows=full.token_ids.nrows()
        )
        candidates = tf.gather(replies_of, token_conversation)  # [tokens, (replies of its conversation)]
        lower = tf.gather(prompt, candidates)
        upper = tf.gather(answered, candidates)
        inside = (flat_positions[:, tf.newaxis] >= lower) & (flat_positions[:, tf.newaxis] < upper)
        supervised = tf.reduce_any(inside, axis=1) & tf.gather(full.accepted, token_conversation)
        mask = positions.with_flat_values(tf.cast(supervised, tf.int64))
        return full.token_ids, mask, full.accepted


def _strip(texts: tf.Tensor, left: tf.Tensor, right: tf.Tensor) -> tf.Tensor:
    """`texts` with leading whitespace removed where `left`, trailing where `right` (Python's strip)."""
    leading = tf.strings.regex_replace(texts, f"^{_WHITESPACE}+", "")
    texts = tf.where(left, leading, texts)
    trailing = tf.strings.regex_replace(texts, f"{_WHITESPACE}+$", "")
    return tf.where(right, trailing, texts)


def _turn_counts(roles: tf.Tensor) -> tf.Tensor:
    """Turns before the first empty role of each row ([batch] int64)."""
    present = tf.cast(tf.not_equal(roles, ""), tf.int64)
    return tf.reduce_sum(tf.math.cumprod(present, axis=1), axis=1)


def _interleaving(turns: tf.Tensor) -> tf.RaggedTensor:
    """Per row, the order of its slots in concat([boundaries (turns + 1), contents (turns)]):
    boundary 0, content 0, boundary 1, ..., boundary `turns`."""
    slots = tf.ragged.range(2 * turns + 1)
    flat = slots.flat_values
    row_turns = tf.gather(turns, slots.value_rowids())
    is_boundary = tf.equal(flat % 2, 0)
    index = tf.where(is_boundary, flat // 2, row_turns + 1 + flat // 2)
    return slots.with_flat_values(index)
