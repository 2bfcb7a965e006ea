"""The per-document cleaning steps as one Beam DoFn: normalise, strip controls, scrub PII, filter
by length. Each step that changes or drops a document emits an event naming it."""
from typing import Iterator

import apache_beam as beam

from components.example_gen.cleaning import text_steps
from components.example_gen.cleaning.events import event
from components.example_gen.options import CleaningOptions
from components.example_gen.records import Document


class CleanEachDocument(beam.DoFn):
    """Applies the enabled per-document steps; also reports the readers' repairs."""

    def __init__(self, options: CleaningOptions):
        self._options = options

    def process(self, document: Document) -> Iterator:
        options, location, text = self._options, document.location, document.text
        for repair in document.repairs:
            yield event(f"repaired:{repair}", location)
        text, changed = text_steps.normalize_unicode(text, options.unicode_normalization)
        if changed:
            yield event("repaired:unicode_normalized", location)
        if options.remove_control_chars:
            text, changed = text_steps.remove_control_chars(text)
            if changed:
                yield event("repaired:control_chars_removed", location)
        if options.scrub_pii:
            text, kinds = text_steps.scrub_pii(text)
            for kind in kinds:
                yield event(f"repaired:pii_{kind}_scrubbed", location)
        if len(text) < options.min_chars:
            yield event("removed:too_short", location)
        elif len(text) > options.max_chars:
            yield event("removed:too_long", location)
        else:
            yield document._replace(text=text)
