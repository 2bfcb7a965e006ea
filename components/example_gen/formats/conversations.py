"""Instruction data: one conversation per JSON record, in the formats fine-tuning tools read,
turned into one canonical form, a sequence of (role, content) turns with roles `system`, `user`
and `assistant` (`records.Document.turns`).

    messages           {"messages": [{"role": "system" | "user" | "assistant", "content": "..."}, ...]}
                       (TRL, OpenAI)
    prompt_completion  {"prompt": "...", "completion": "..."}: a user turn and an assistant turn; or
                       TRL's conversational form, where both are lists of messages (the completion
                       holds assistant turns only)
    alpaca             {"instruction": "...", "input": "..." (optional), "output": "..."}: the user
                       turn is the instruction, followed by a blank line and the input when the input
                       is not blank; the assistant turn is the output
    vertex             {"systemInstruction": {"parts": [{"text": "..."}]} (optional),
                        "contents": [{"role": "user" | "model", "parts": [{"text": "..."}, ...]}, ...]}
                       (Vertex AI supervised tuning): `model` is `assistant`, the system instruction
                       a leading system turn, and a turn's text parts are concatenated (as the
                       Gemini SDK's `text` does)
    nemo               {"input": "...", "output": "...", "system": "..." (optional)} (NeMo SFT)

`example_gen.conversation_format` forces one format for every record; `auto` detects it per
record (`detect_format`): the first format whose fields the record has all of, in the order of
`SIGNATURES` (messages; contents; instruction + output; prompt + completion; input + output),
wins over the text field, because Alpaca and chat exports often carry the rendered prompt as a
`text` field beside the conversation; a record with the text field and none of those is plain
text, as before; one with only part of a format's fields (a prompt without a completion) is read
as that format, so the quarantine names the field that is missing.

A record that is not a valid conversation is quarantined as `invalid_conversation`, the detail
naming the format and the problem: no turns (an empty messages list), a turn that is not an
object, a missing or non-string role or content, an unknown role, no assistant turn, or an
assistant turn with no visible character.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from components.example_gen.formats.fields import METADATA_NOT_UNICODE, encodable_metadata, record_to_outcome
from components.example_gen.formats.lines import Outcome
from components.example_gen.options import AUTO_FORMAT, TEXT_FORMAT, ReadOptions
from components.example_gen.records import (
    ASSISTANT,
    INVALID_CONVERSATION,
    INVALID_UTF8,
    MISSING_TEXT_FIELD,
    ROLES,
    SYSTEM,
    TURN_SEPARATOR,
    USER,
    Document,
    Rejection,
    Turn,
)
from components.example_gen.utf8 import ensure_encodable

VERTEX_ROLES = {"user": USER, "model": ASSISTANT}
# (format, the fields a record of that format has), in detection order (module docstring).
SIGNATURES: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("messages", ("messages",)),
    ("vertex", ("contents",)),
    ("alpaca", ("instruction", "output")),
    ("prompt_completion", ("prompt", "completion")),
    ("nemo", ("input", "output")),
)


class InvalidConversation(ValueError):
    """The record is not a valid conversation; the message names the problem."""


def _kind(value: Any) -> str:
    """'a string', 'a list', 'null', ... for messages about a value of the wrong type."""
    names = {str: "a string", list: "a list", dict: "an object", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _has(record: Dict[str, Any], field: str) -> bool:
    return record.get(field) is not None


def _field(record: Dict[str, Any], field: str) -> Any:
    if not _has(record, field):
        raise InvalidConversation(f"no field '{field}'")
    return record[field]


def _string(value: Any, what: str) -> str:
    if value is None:
        raise InvalidConversation(f"{what} is missing")
    if not isinstance(value, str):
        raise InvalidConversation(f"{what} is {_kind(value)}, not a string")
    return value


def _objects(value: Any, what: str, item: str) -> List[Dict[str, Any]]:
    """`value` (named `what`) as a list of JSON objects (each named `item` and its number)."""
    if not isinstance(value, list):
        raise InvalidConversation(f"{what} is {_kind(value)}, not a list")
    for number, element in enumerate(value, 1):
        if not isinstance(element, dict):
            raise InvalidConversation(f"{item} {number} is {_kind(element)}, not an object")
    return value


def _message_turns(value: Any, what: str, item: str) -> List[Turn]:
    """[{role, content}, ...] as turns (roles are checked by `check_turns`)."""
    turns = []
    for number, message in enumerate(_objects(value, what, item), 1):
        role = _string(message.get("role"), f"{item} {number} role")
        turns.append((role, _string(message.get("content"), f"{item} {number} content")))
    return turns


def messages_turns(record: Dict[str, Any]) -> List[Turn]:
    return _message_turns(_field(record, "messages"), "'messages'", "turn")


def prompt_completion_turns(record: Dict[str, Any]) -> List[Turn]:
    prompt, completion = _field(record, "prompt"), _field(record, "completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        return [(USER, prompt), (ASSISTANT, completion)]
    if isinstance(prompt, list) and isinstance(completion, list):
        replies = _message_turns(completion, "'completion'", "completion turn")
        for number, (role, _) in enumerate(replies, 1):
            if role != ASSISTANT:
                raise InvalidConversation(
                    f"completion turn {number} has role '{role}': a completion holds assistant turns only"
                )
        return _message_turns(prompt, "'prompt'", "prompt turn") + replies
    raise InvalidConversation(
        f"'prompt' is {_kind(prompt)} and 'completion' is {_kind(completion)}: both must be "
        "strings, or both lists of messages"
    )


def alpaca_turns(record: Dict[str, Any]) -> List[Turn]:
    instruction = _string(_field(record, "instruction"), "'instruction'")
    output = _string(_field(record, "output"), "'output'")
    extra = _string(record["input"], "'input'") if _has(record, "input") else ""
    request = instruction + TURN_SEPARATOR + extra if extra.strip() else instruction
    return [(USER, request), (ASSISTANT, output)]


def _vertex_text(parts: Any, what: str) -> str:
    pieces = []
    for number, part in enumerate(_objects(parts, f"{what} parts", f"{what} part"), 1):
        if not _has(part, "text"):
            raise InvalidConversation(f"{what} part {number} has no 'text' (only text parts are read)")
        pieces.append(_string(part["text"], f"{what} part {number} 'text'"))
    return "".join(pieces)


def vertex_turns(record: Dict[str, Any]) -> List[Turn]:
    turns = []
    system = record.get("systemInstruction", record.get("system_instruction"))
    if system is not None:
        if not isinstance(system, dict):
            raise InvalidConversation(f"'systemInstruction' is {_kind(system)}, not an object")
        turns.append((SYSTEM, _vertex_text(system.get("parts"), "systemInstruction")))
    for number, content in enumerate(_objects(_field(record, "contents"), "'contents'", "contents item"), 1):
        role = _string(content.get("role"), f"contents item {number} role")
        if role not in VERTEX_ROLES:
            raise InvalidConversation(f"contents item {number} has unknown role '{role}' (Vertex roles: user, model)")
        turns.append((VERTEX_ROLES[role], _vertex_text(content.get("parts"), f"contents item {number}")))
    return turns


def nemo_turns(record: Dict[str, Any]) -> List[Turn]:
    request = _string(_field(record, "input"), "'input'")
    reply = _string(_field(record, "output"), "'output'")
    system = _string(record["system"], "'system'") if _has(record, "system") else ""
    return ([(SYSTEM, system)] if system else []) + [(USER, request), (ASSISTANT, reply)]


PARSERS: Dict[str, Callable[[Dict[str, Any]], List[Turn]]] = {
    "messages": messages_turns,
    "prompt_completion": prompt_completion_turns,
    "alpaca": alpaca_turns,
    "vertex": vertex_turns,
    "nemo": nemo_turns,
}


def _is_blank(text: str) -> bool:
    """No visible character (only whitespace, control or format characters)."""
    return not any(char.isprintable() and not char.isspace() for char in text)


def check_turns(turns: Sequence[Turn]) -> Tuple[Turn, ...]:
    """`turns` if they are a valid conversation (module docstring), else raises InvalidConversation."""
    if not turns:
        raise InvalidConversation("no turns (an empty list of messages)")
    for number, (role, _) in enumerate(turns, 1):
        if role not in ROLES:
            raise InvalidConversation(f"turn {number} has unknown role '{role}' (roles: {', '.join(ROLES)})")
    if not any(role == ASSISTANT for role, _ in turns):
        raise InvalidConversation("no assistant turn")
    for number, (role, content) in enumerate(turns, 1):
        if role == ASSISTANT and _is_blank(content):
            raise InvalidConversation(f"turn {number} (assistant) is empty")
    return tuple(turns)


def detect_format(record: Dict[str, Any], text_field: str) -> str:
    """The format of one record for `conversation_format: auto` (module docstring); TEXT_FORMAT
    for plain text (also for a record without any known field: the text reader names it)."""
    for name, fields in SIGNATURES:
        if all(_has(record, field) for field in fields):
            return name
    if _has(record, text_field):
        return TEXT_FORMAT
    for name, fields in SIGNATURES:
        if any(_has(record, field) for field in fields):
            return name
    return TEXT_FORMAT


def _signature_listing() -> str:
    return ", ".join("+".join(fields) for _, fields in SIGNATURES)


def conversation_outcome(
    record: Dict[str, Any], format_name: str, source: str, line: int, raw: bytes, options: ReadOptions
) -> Outcome:
    """A conversation Document from `record` read as `format_name`, or a Rejection naming what is wrong."""
    sample, size = raw[: options.quarantine_sample_bytes], len(raw)
    try:
        turns = check_turns(PARSERS[format_name](record))
    except InvalidConversation as exc:
        return Rejection(INVALID_CONVERSATION, source, line, sample, size, f"{format_name}: {exc}")
    encoded, repairs = [], set()
    for number, (role, content) in enumerate(turns, 1):
        content, content_repairs = ensure_encodable(content, options.invalid_utf8, f"{source}:{line}")
        if content is None:
            return Rejection(INVALID_UTF8, source, line, sample, size, f"turn {number} ({role}) is not valid Unicode")
        encoded.append((role, content))
        repairs.update(content_repairs)
    metadata = encodable_metadata(record, options.metadata_fields)
    if metadata is None:
        return Rejection(INVALID_UTF8, source, line, sample, size, METADATA_NOT_UNICODE)
    return Document(None, source, line, metadata, tuple(sorted(repairs))).with_turns(encoded)


def record_outcome(record: Dict[str, Any], source: str, line: int, raw: bytes, options: ReadOptions) -> Outcome:
    """A Document (plain text or a conversation, per `options.conversation_format`) or a Rejection
    for one parsed JSON object."""
    format_name = options.conversation_format
    if format_name == AUTO_FORMAT:
        format_name = detect_format(record, options.jsonl_text_field)
    if format_name != TEXT_FORMAT:
        return conversation_outcome(record, format_name, source, line, raw, options)
    outcome = record_to_outcome(record, options.jsonl_text_field, source, line, raw, options)
    if (
        options.conversation_format == AUTO_FORMAT
        and isinstance(outcome, Rejection)
        and outcome.reason == MISSING_TEXT_FIELD
    ):
        return outcome._replace(detail=f"{outcome.detail}, nor the fields of a conversation ({_signature_listing()})")
    return outcome


def is_conversation_format(format_name: Optional[str]) -> bool:
    """Whether `format_name` (a `conversation_format` value) forces conversations."""
    return format_name not in (AUTO_FORMAT, TEXT_FORMAT, None)
