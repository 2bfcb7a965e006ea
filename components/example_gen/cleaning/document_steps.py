"""The per-document cleaning steps as one Beam DoFn: normalise, strip controls, scrub PII, filter
by length. Each step that changes or drops a document emits an event naming it (once per
document, however many of a conversation's turns it changed).

A conversation is cleaned turn by turn (a placeholder or a normalisation never crosses a turn
boundary, and the roles stay as they are); the length filter measures its flattened text."""

from typing import Iterator, List, Tuple

import apache_beam as beam

from components.example_gen.cleaning import text_steps
from components.example_gen.cleaning.events import event
from components.example_gen.options import CleaningOptions
from components.example_gen.records import Document


class CleanEachDocument(beam.DoFn):
    """Applies the enabled per-document steps; also reports the readers' repairs."""

    def __init__(self, options: CleaningOptions):
        self._options = options

    def _clean(self, text: str) -> Tuple[str, List[str]]:
        """`text` after the enabled steps, and the repairs made, in step order."""
        options, repairs = self._options, []
        text, changed = text_steps.normalize_unicode(text, options.unicode_normalization)
        if changed:
            repairs.append("unicode_normalized")
        if options.remove_control_chars:
            text, changed = text_steps.remove_control_chars(text)
            if changed:
                repairs.append("control_chars_removed")
        if options.scrub_pii:
            text, kinds = text_steps.scrub_pii(text)
            repairs += [f"pii_{kind}_scrubbed" for kind in kinds]
        return text, repairs

    def _clean_turns(self, document: Document) -> Tuple[Document, List[str]]:
        """The conversation with every turn cleaned, and the repairs made in any of its turns (each once)."""
        turns, repairs = [], []
        for role, content in document.turns:
            content, turn_repairs = self._clean(content)
            turns.append((role, content))
            repairs += [repair for repair in turn_repairs if repair not in repairs]
        return document.with_turns(turns), repairs

    def process(self, document: Document) -> Iterator:
        options, location = self._options, document.location
        for repair in document.repairs:
            yield event(f"repaired:{repair}", location)
        if document.is_conversation:
            document, repairs = self._clean_turns(document)
        else:
            text, repairs = self._clean(document.text)
            document = document._replace(text=text)
        for repair in repairs:
            yield event(f"repaired:{repair}", location)
        if len(document.text) < options.min_chars:
            yield event("removed:too_short", location)
        elif len(document.text) > options.max_chars:
            yield event("removed:too_long", location)
        else:
            yield document
