"""Exact deduplication on Beam: documents with identical text are keyed by a content hash and
only the first by (source, line) is kept. A conversation is compared on its text (the contents
of its turns in order, without role names): the same words in the same order are the same
content however its turns are split or labelled, and near-duplicate removal sees it so too.

The dedup is a combiner, so Beam lifts it before the shuffle: each worker keeps one document per
content hash and only the (source, line) keys of the duplicates it saw, instead of shipping
every duplicate's text through the GroupByKey.
"""

import hashlib
from typing import Iterable, Iterator, List, Optional, Tuple

import apache_beam as beam

from components.example_gen.cleaning.events import EVENTS_TAG, event
from components.example_gen.records import Document

Key = Tuple[str, int]
# (the first document by position, the positions of the other documents with the same text)
FirstAndDuplicates = Tuple[Optional[Document], List[Key]]


class KeepFirst(beam.CombineFn):
    """Per content hash: the first document by `Document.sort_key` and the keys of all others."""

    def create_accumulator(self) -> FirstAndDuplicates:
        return None, []

    def add_input(self, accumulator: FirstAndDuplicates, document: Document) -> FirstAndDuplicates:
        first, duplicates = accumulator
        if first is None:
            return document, duplicates
        if document.sort_key() < first.sort_key():
            first, document = document, first
        duplicates.append(document.sort_key())
        return first, duplicates

    def merge_accumulators(self, accumulators: Iterable[FirstAndDuplicates]) -> FirstAndDuplicates:
        merged: FirstAndDuplicates = self.create_accumulator()
        for first, duplicates in accumulators:
            if first is not None:
                merged = self.add_input(merged, first)
            merged[1].extend(duplicates)
        return merged

    def extract_output(self, accumulator: FirstAndDuplicates) -> FirstAndDuplicates:
        return accumulator


def _first_and_events(keyed: Tuple[bytes, FirstAndDuplicates]) -> Iterator:
    first, duplicates = keyed[1]
    yield first
    for source, line in sorted(duplicates):
        yield event("removed:exact_duplicate", f"{source}:{line} (duplicate of {first.location})")


@beam.ptransform_fn
def RemoveExactDuplicates(documents: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
    """Returns outputs with the unique documents as main output and EVENTS_TAG events."""
    return (
        documents
        | "ByContentHash" >> beam.Map(lambda doc: (hashlib.sha256(doc.text.encode("utf-8")).digest(), doc))
        | "KeepFirstPerHash" >> beam.CombinePerKey(KeepFirst())
        | "KeepFirst" >> beam.FlatMap(_first_and_events).with_outputs(EVENTS_TAG, main="documents")
    )
