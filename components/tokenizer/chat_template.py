"""Chat templates: a checkpoint's Jinja template (or the pipeline's default), rendered as Hugging
Face renders it, and reduced to a `ChatGrammar` that string ops can render in a TF graph.

**Where a template comes from** (`read_checkpoint_template`): `chat_template.jinja` beside the
tokenizer files (transformers >= 4.5x writes it), else `chat_template` in `tokenizer_config.json`
(a string, or a list of named templates, of which `default` is the one transformers uses). A
model without a checkpoint uses `DEFAULT_TEMPLATE` (ChatML's layout) with the pipeline's own
special tokens (`DEFAULT_SPECIAL_TOKENS`, appended to the learned vocabulary).

**Rendering as Hugging Face does** (`render`): a sandboxed, immutable Jinja2 environment with
`trim_blocks`, `lstrip_blocks` and the loop-control extension; `{% generation %}` blocks (the
markers of assistant text Hugging Face's assistant-token mask reads) rendered as their body; a
`tojson` filter that leaves non-ASCII and HTML characters as they are; `raise_exception(message)`
and `strftime_now(format)` (the local date and time: a template that writes today's date gets the
date its grammar was derived, in the Tokenizer stage); and as variables `messages` (a list of
{role, content}), `add_generation_prompt`, every special token by name (`bos_token`,
`eos_token`, ...) and the extras a caller passes.

**The grammar** (`derive_grammar`): TF Serving runs no Jinja, and Transform cannot call Python
per example, so a template is used in the graph as what it is for almost every chat model: a
fixed text between consecutive turns. Writing START and END (or GEN, the generation prompt) for
the ends of a conversation, a rendering is

    L(START, r1) c1 L(r1, r2) c2 ... cn L(rn, END or GEN)

where ri are the roles, ci the contents (possibly with the whitespace at one side removed, as
templates that `trim` do) and L(a, b) the template's literal text at the boundary from a turn of
role a to one of role b. The grammar is found by rendering every role sequence up to four turns,
with and without the generation prompt, with sentinel contents (private-use characters padded
with whitespace, so a trim shows), reading each boundary's literal between the sentinels, and is
then checked: every boundary must render the same text wherever it occurs, and the grammar's own
rendering of conversations with ordinary contents (multi-turn, whitespace at the ends, non-ASCII,
emoji) must be byte-equal to the template's. A boundary the template refuses (it raises, as
templates enforcing alternating roles do) is not in the grammar; a conversation that needs it is
refused (`ChatGrammar.render` raises, the graph gives it no supervised token). A template whose
output depends on the contents in another way (numbering turns, changing their case, reading
another message) fails the check, with the first differing rendering in the error.

The literals hold special tokens as text (`<|im_start|>`); `ChatGrammar.items` splits them into
text and special-token items, which is how the rendered text is tokenized: special tokens by
their ids, the text between them with the tokenizer. Contents are always text: a user who types
`<|im_end|>` gets those characters, never the token (Hugging Face's tokenizer would turn them
into the control token; this is a deliberate difference).
"""

import hashlib
import json
import os
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

ROLES = ("system", "user", "assistant")
START, END, GEN = "<start>", "<end>", "<generation>"
TEMPLATE_FILE = "chat_template.jinja"
GRAMMAR_FILE = "chat_grammar.json"

# The template of a model trained from scratch: ChatML's layout with its two special tokens.
DEFAULT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
DEFAULT_SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>")

_SENTINEL_OPEN, _SENTINEL_CLOSE = "\ue000", "\ue001"
_PADDING = " \n "  # around every sentinel: a template that strips contents removes it
_LONGEST_PROBE = 4  # turns in the role sequences the grammar is read from


class ChatTemplateError(ValueError):
    """A template that cannot be used as a grammar, or a conversation it refuses."""


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str):
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _strftime_now(format: str) -> str:
    import datetime

    return datetime.datetime.now().strftime(format)


def _generation_markers():
    """The Jinja2 extension for `{% generation %}...{% endgeneration %}`: the body, rendered in a
    scope of its own (a call block, as Hugging Face's AssistantTracker parses it)."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationMarkers(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    return GenerationMarkers


def compile_template(template: str):
    """The Jinja2 template object, in an environment configured as Hugging Face's (module docstring)."""
    from jinja2 import ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_generation_markers(), ext.loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment.from_string(template)


def render(
    template: str,
    messages: Sequence,
    add_generation_prompt: bool,
    variables: Optional[Dict[str, str]] = None,
    compiled=None,
) -> str:
    """`template` rendered with `messages` ((role, content) pairs or dicts) as Hugging Face's
    `apply_chat_template(..., tokenize=False)` renders it; `variables`: the special tokens by name
    and any extra keyword."""
    rows = [
        dict(role=m["role"], content=m["content"]) if isinstance(m, dict) else {"role": m[0], "content": m[1]}
        for m in messages
    ]
    return (compiled or compile_template(template)).render(
        messages=rows, add_generation_prompt=add_generation_prompt, **(variables or {})
    )


class TemplateSource(NamedTuple):
    """A template's text and the file it was read from."""

    text: str
    origin: str


def read_checkpoint_template(directory: str) -> Optional[TemplateSource]:
    """The chat template a checkpoint directory carries (module docstring), or None."""
    import tensorflow as tf

    jinja_path = os.path.join(directory, TEMPLATE_FILE)
    if tf.io.gfile.exists(jinja_path):
        with tf.io.gfile.GFile(jinja_path, "r") as handle:
            return TemplateSource(handle.read(), jinja_path)
    config_path = os.path.join(directory, "tokenizer_config.json")
    if not tf.io.gfile.exists(config_path):
        return None
    with tf.io.gfile.GFile(config_path, "r") as handle:
        try:
            config = json.loads(handle.read())
        except json.JSONDecodeError as exc:
            raise ChatTemplateError(f"{config_path} is not valid JSON: {exc}") from None
    template = config.get("chat_template")
    if template is None:
        return None
    if isinstance(template, list):  # named templates: transformers uses the one named "default"
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        if "default" not in named:
            raise ChatTemplateError(
                f"{config_path}: chat_template lists templates {sorted(named)} but none "
                "named 'default' (the one transformers applies)"
            )
        template = named["default"]
    if not isinstance(template, str) or not template.strip():
        raise ChatTemplateError(f"{config_path}: chat_template is {type(template).__name__}, not a template string")
    return TemplateSource(template, config_path + ":chat_template")


class Boundary(NamedTuple):
    """The literal text at one boundary between turns, and whether the contents beside it are
    stripped of whitespace on that side."""

    text: str
    strips_previous: bool  # the previous turn's content loses its trailing whitespace here
    strips_next: bool  # the next turn's content loses its leading whitespace here


def _sentinel(index: int) -> str:
    return f"{_SENTINEL_OPEN}{index}{_SENTINEL_CLOSE}"


def _python_whitespace_strip(text: str, left: bool, right: bool) -> str:
    if left:
        text = text.lstrip()
    if right:
        text = text.rstrip()
    return text


class ChatGrammar(NamedTuple):
    """A template as boundary literals (module docstring); JSON-able (`to_json`)."""

    boundaries: Dict[Tuple[str, str], Boundary]
    special_tokens: Tuple[str, ...]  # the token strings that are special in the literals
    template_sha256: str

    def boundary(self, previous: str, following: str) -> Boundary:
        found = self.boundaries.get((previous, following))
        if found is None:
            raise ChatTemplateError(
                f"the chat template does not accept {_describe(following)} after {_describe(previous)}"
            )
        return found

    def check_roles(self, roles: Sequence[str], add_generation_prompt: bool) -> None:
        """Raises ChatTemplateError if the template refuses this order of roles."""
        sequence = [START, *roles, GEN if add_generation_prompt else END]
        for role in roles:
            if role not in ROLES:
                raise ChatTemplateError(f"unknown role {role!r} (roles are {', '.join(ROLES)})")
        for previous, following in zip(sequence, sequence[1:]):
            self.boundary(previous, following)

    def render(self, messages: Sequence, add_generation_prompt: bool) -> str:
        """The conversation rendered with the grammar; byte-equal to the template's rendering for
        every conversation `derive_grammar` checked, and raises where the template would."""
        return "".join(piece for piece, _ in self.units(messages, add_generation_prompt))

    def units(self, messages: Sequence, add_generation_prompt: bool) -> List[Tuple[str, bool]]:
        """The rendering as it is tokenized: (special token, True) items and (text, False) units,
        a unit being all the text between two special tokens. A special token's text inside a
        content stays text (module docstring)."""
        roles = [m[0] if not isinstance(m, dict) else m["role"] for m in messages]
        contents = [m[1] if not isinstance(m, dict) else m["content"] for m in messages]
        self.check_roles(roles, add_generation_prompt)
        sequence = [START, *roles, GEN if add_generation_prompt else END]
        boundaries = [self.boundary(a, b) for a, b in zip(sequence, sequence[1:])]
        items = list(self.items(boundaries[0].text))
        for index, content in enumerate(contents):
            before, after = boundaries[index], boundaries[index + 1]
            items.append((_python_whitespace_strip(content, before.strips_next, after.strips_previous), False))
            items += self.items(after.text)
        units: List[Tuple[str, bool]] = []
        for piece, special in items:
            if not special and units and not units[-1][1]:
                units[-1] = (units[-1][0] + piece, False)
            else:
                units.append((piece, special))
        return units

    def items(self, text: str) -> List[Tuple[str, bool]]:
        """`text` (a literal) split into (piece, is_special) items at the special tokens."""
        items: List[Tuple[str, bool]] = []
        position, longest_first = 0, sorted(self.special_tokens, key=len, reverse=True)
        start = 0
        while position < len(text):
            match = next((token for token in longest_first if text.startswith(token, position)), None)
            if match is None:
                position += 1
                continue
            if position > start:
                items.append((text[start:position], False))
            items.append((match, True))
            position += len(match)
            start = position
        if start < len(text):
            items.append((text[start:], False))
        return items

    def end_of_turn_tokens(self) -> List[str]:
        """The special tokens that close an assistant turn (the first special token of the
        assistant -> END boundary; where none, nothing)."""
        boundary = self.boundaries.get(("assistant", END))
        if boundary is None:
            return []
        specials = [piece for piece, special in self.items(boundary.text) if special]
        return specials[:1]

    def to_json(self) -> dict:
        return {
            "boundaries": [
                {
                    "from": a,
                    "to": b,
                    "text": boundary.text,
                    "strips_previous": boundary.strips_previous,
                    "strips_next": boundary.strips_next,
                }
                for (a, b), boundary in sorted(self.boundaries.items())
            ],
            "special_tokens": list(self.special_tokens),
            "template_sha256": self.template_sha256,
        }

    @classmethod
    def from_json(cls, data: dict, source: str) -> "ChatGrammar":
        try:
            boundaries = {
                (row["from"], row["to"]): Boundary(row["text"], bool(row["strips_previous"]), bool(row["strips_next"]))
                for row in data["boundaries"]
            }
            return cls(boundaries, tuple(data["special_tokens"]), data["template_sha256"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{source}: bad chat grammar record ({type(exc).__name__}: {exc})") from None


def _describe(role: str) -> str:
    if role == START:
        return "the start of the conversation"
    if role in (END, GEN):
        return "the end of the conversation" if role == END else "the generation prompt"
    return f"{'an' if role == 'assistant' else 'a'} {role} turn"


def _role_sequences(longest: int) -> Iterable[Tuple[str, ...]]:
    import itertools

    for length in range(1, longest + 1):
        yield from itertools.product(ROLES, repeat=length)


class _NotPlaced(ChatTemplateError):
    """A rendering that repeats a content or writes them out of order."""


def _read_boundaries(rendered: str, count: int) -> Optional[List[Tuple[str, bool, bool]]]:
    """(literal, stripped before, stripped after) for each of the count + 1 boundaries of a
    rendering of `count` sentinel contents; None when a content is missing (the template leaves
    this order of roles out, as one that folds a lone system turn into a first user turn does);
    _NotPlaced when one is repeated or out of order."""
    if any(rendered.count(_sentinel(index)) > 1 for index in range(count)):
        raise _NotPlaced("a content is written more than once")
    if any(_sentinel(index) not in rendered for index in range(count)):
        return None
    boundaries, position = [], 0
    left_stripped = []
    right_stripped = []
    texts = []
    for index in range(count):
        sentinel = _sentinel(index)
        found = rendered.find(sentinel, position)
        if found < 0:
            raise _NotPlaced("the contents are written out of order")
        literal = rendered[position:found]
        stripped_left = not literal.endswith(_PADDING)
        texts.append(literal if stripped_left else literal[: -len(_PADDING)])
        left_stripped.append(stripped_left)
        position = found + len(sentinel)
        right_kept = rendered.startswith(_PADDING, position)
        right_stripped.append(not right_kept)
        if right_kept:
            position += len(_PADDING)
    texts.append(rendered[position:])
    for index, text in enumerate(texts):
        boundaries.append(
            (text, right_stripped[index - 1] if index > 0 else False, left_stripped[index] if index < count else False)
        )
    return boundaries


def derive_grammar(
    template: str,
    special_tokens: Sequence[str],
    variables: Optional[Dict[str, str]] = None,
    origin: str = "the chat template",
) -> ChatGrammar:
    """The template as a `ChatGrammar`, checked (module docstring); ChatTemplateError names the
    boundary or conversation where the template is not one."""
    from jinja2.exceptions import TemplateError, TemplateSyntaxError

    try:
        compiled = compile_template(template)
    except TemplateSyntaxError as exc:
        raise ChatTemplateError(f"{origin}: Jinja syntax error at line {exc.lineno}: {exc.message}") from None
    observed: Dict[Tuple[str, str], Tuple[Boundary, Tuple[str, ...]]] = {}
    accepted = set()  # (roles, generation prompt) the template renders with every content in place
    for roles in _role_sequences(_LONGEST_PROBE):
        for generation in (False, True):
            messages = [(role, _PADDING + _sentinel(index) + _PADDING) for index, role in enumerate(roles)]
            try:
                rendered = render(template, messages, generation, variables, compiled)
            except TemplateError:
                continue  # the template refuses this order of roles
            except Exception as exc:  # noqa: BLE001  (a template bug: report it with the conversation)
                raise ChatTemplateError(
                    f"{origin}: rendering roles {list(roles)} failed: {type(exc).__name__}: {exc}"
                ) from None
            try:
                read = _read_boundaries(rendered, len(roles))
            except _NotPlaced as exc:
                raise ChatTemplateError(
                    f"{origin}: the template does not write each message's content once, in order ({exc}: roles "
                    f"{list(roles)} rendered as {rendered!r}); only templates that place contents as they are "
                    "(or stripped of surrounding whitespace) can be used"
                ) from None
            if read is None:
                continue
            accepted.add((roles, generation))
            sequence = [START, *roles, GEN if generation else END]
            for (text, strips_previous, strips_next), (a, b) in zip(read, zip(sequence, sequence[1:])):
                boundary = Boundary(text, strips_previous, strips_next)
                known = observed.get((a, b))
                if known is not None and known[0] != boundary:
                    raise ChatTemplateError(
                        f"{origin}: the text between {_describe(a)} and {_describe(b)} depends on "
                        f"where it occurs ({known[0].text!r} for roles {list(known[1])}, {boundary.text!r} for roles "
                        f"{list(roles)}): the template is not a fixed text between turns"
                    )
                observed[(a, b)] = (boundary, roles)
    if (START, "user") not in observed or ("user", GEN) not in observed:
        raise ChatTemplateError(
            f"{origin}: the template renders no conversation of one user turn with a generation prompt"
        )
    grammar = ChatGrammar(
        {key: value[0] for key, value in observed.items()},
        tuple(special_tokens),
        hashlib.sha256(template.encode("utf-8")).hexdigest(),
    )
    _check_against_template(grammar, template, compiled, variables, origin, accepted)
    return grammar


# Conversations the grammar must render exactly as the template does (contents with whitespace
# at the ends, line breaks, non-ASCII and emoji, a literal that looks like a special token).
_CHECK_CONTENTS = (
    "Hello!",
    "  two leading spaces and a trailing newline\n",
    "Zoë wrote: «ça marche» 🙂",
    "line one\nline two\n\nline four",
    "春眠不觉晓，处处闻啼鸟。",
    "\tTabbed, then <|im_end|> typed",
    "",
    "ok ",
)


def check_conversations() -> List[List[Tuple[str, str]]]:
    """The role/content conversations `derive_grammar` compares the grammar's rendering with the
    template's on (every role order up to four turns, contents from `_CHECK_CONTENTS`)."""
    conversations = []
    for index, roles in enumerate(_role_sequences(_LONGEST_PROBE)):
        conversations.append(
            [(role, _CHECK_CONTENTS[(index + turn) % len(_CHECK_CONTENTS)]) for turn, role in enumerate(roles)]
        )
    return conversations


def _check_against_template(grammar: ChatGrammar, template: str, compiled, variables, origin: str, accepted) -> None:
    """Raises unless the grammar renders every check conversation as the template does, and
    refuses those the template refuses or leaves contents out of (`accepted` holds the rest)."""
    for messages in check_conversations():
        for generation in (False, True):
            roles = tuple(m[0] for m in messages)
            expected = (
                render(template, messages, generation, variables, compiled) if (roles, generation) in accepted else None
            )
            try:
                ours = grammar.render(messages, generation)
            except ChatTemplateError:
                ours = None
            if expected != ours:
                raise ChatTemplateError(
                    f"{origin}: the template's output depends on the message contents beyond placing them: "
                    f"roles {[m[0] for m in messages]} (generation prompt {generation}) render as {expected!r}, "
                    f"the fixed texts between turns give {ours!r}"
                )


def default_variables(special_names: Dict[str, Optional[str]]) -> Dict[str, str]:
    """The template variables for special tokens: `bos_token`, `eos_token`, ... (None dropped)."""
    return {f"{name}_token": token for name, token in special_names.items() if token is not None}


class ChatSpec(NamedTuple):
    """What a tokenizer directory says about chat: the template, its grammar, the ids of the
    grammar's special tokens, and the ids that end a generated reply."""

    template: str
    grammar: ChatGrammar
    special_ids: Dict[str, int]
    stop_token_ids: Tuple[int, ...]  # decoding stops at any of them (end of turn, end of text)
    end_of_turn_ids: Tuple[int, ...]  # the template's token(s) closing an assistant turn

    @property
    def template_sha256(self) -> str:
        return self.grammar.template_sha256

    def files(self) -> Dict[str, bytes]:
        """The files a tokenizer directory carries for it (TEMPLATE_FILE, GRAMMAR_FILE)."""
        record = {
            "grammar": self.grammar.to_json(),
            "special_ids": dict(sorted(self.special_ids.items())),
            "stop_token_ids": sorted(set(self.stop_token_ids)),
            "end_of_turn_token_ids": list(self.end_of_turn_ids),
        }
        return {
            TEMPLATE_FILE: self.template.encode("utf-8"),
            GRAMMAR_FILE: json.dumps(record, indent=2, ensure_ascii=False).encode("utf-8"),
        }

    @classmethod
    def from_files(cls, files: Dict[str, bytes], source: str) -> Optional["ChatSpec"]:
        """The chat spec in a tokenizer directory's files, or None when it has none."""
        if GRAMMAR_FILE not in files:
            return None
        if TEMPLATE_FILE not in files:
            raise ValueError(f"{source}: {GRAMMAR_FILE} without {TEMPLATE_FILE}")
        try:
            record = json.loads(files[GRAMMAR_FILE].decode("utf-8"))
            return cls(
                files[TEMPLATE_FILE].decode("utf-8"),
                ChatGrammar.from_json(record["grammar"], source),
                {str(k): int(v) for k, v in record["special_ids"].items()},
                tuple(int(i) for i in record["stop_token_ids"]),
                tuple(int(i) for i in record["end_of_turn_token_ids"]),
            )
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: bad chat record {GRAMMAR_FILE} ({type(exc).__name__}: {exc})") from None


def chat_spec(
    template: str, special_ids: Dict[str, int], variables: Dict[str, str], extra_stop_ids: Sequence[int], origin: str
) -> ChatSpec:
    """The grammar of `template` (special tokens: the keys of `special_ids`, token -> id) and the
    ids decoding stops at: the template's end-of-turn token and `extra_stop_ids` (the checkpoint's
    generation_config.json eos ids, the tokenizer's end of text)."""
    grammar = derive_grammar(template, tuple(special_ids), variables, origin)
    used = {
        piece
        for (_, _), boundary in grammar.boundaries.items()
        for piece, special in grammar.items(boundary.text)
        if special
    }
    end_of_turn = tuple(special_ids[token] for token in grammar.end_of_turn_tokens())
    if not end_of_turn:
        raise ChatTemplateError(
            f"{origin}: an assistant turn ends with no special token, so decoding could not tell where a reply ends"
        )
    stop = tuple(sorted(set(end_of_turn) | {int(i) for i in extra_stop_ids}))
    return ChatSpec(
        template,
        grammar._replace(special_tokens=tuple(sorted(used))),
        {token: special_ids[token] for token in sorted(used)},
        stop,
        end_of_turn,
    )
