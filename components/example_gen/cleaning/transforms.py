"""`CleanDocuments`: every cleaning step in order, as one Beam PTransform.

Runs inside the ExampleGen executor (so cleaning scales with the same runner and its counts land
on the Examples artifact), and is usable on its own on any PCollection of `Document`s.
"""
import apache_beam as beam

from components.example_gen.cleaning.document_steps import CleanEachDocument
from components.example_gen.cleaning.events import EVENTS_TAG
from components.example_gen.cleaning.exact_dedup import RemoveExactDuplicates
from components.example_gen.cleaning.near_dedup import RemoveNearDuplicates
from components.example_gen.options import CleaningOptions


class CleanDocuments(beam.PTransform):
    """Documents in; a dict out: 'documents' (the cleaned, kept ones) and 'events' (what each
    step changed or removed, as (kind, location) pairs)."""

    def __init__(self, options: CleaningOptions):
        super().__init__()
        self._options = options

    def expand(self, documents):
        events = []
        cleaned = documents | "EachDocument" >> beam.ParDo(CleanEachDocument(self._options)).with_outputs(
            EVENTS_TAG, main="documents")
        documents, events = cleaned.documents, [cleaned[EVENTS_TAG]]
        if self._options.exact_dedup:
            unique = documents | "ExactDedup" >> RemoveExactDuplicates()
            documents = unique.documents
            events.append(unique[EVENTS_TAG])
        if self._options.near_dedup:
            distinct = documents | "NearDedup" >> RemoveNearDuplicates(self._options)
            documents = distinct.documents
            events.append(distinct[EVENTS_TAG])
        return {"documents": documents, "events": tuple(events) | "AllEvents" >> beam.Flatten()}
