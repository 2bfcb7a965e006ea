"""Exact deduplication on Beam: documents with identical text are grouped by a content hash and
only the first by (source, line) is kept."""
import hashlib
from typing import Iterable, Iterator, Tuple

import apache_beam as beam

from components.example_gen.cleaning.events import EVENTS_TAG, event
from components.example_gen.records import Document


def _keep_first(keyed: Tuple[bytes, Iterable[Document]]) -> Iterator:
    documents = sorted(keyed[1], key=Document.sort_key)
    yield documents[0]
    for duplicate in documents[1:]:
        yield event("removed:exact_duplicate", f"{duplicate.location} (duplicate of {documents[0].location})")


@beam.ptransform_fn
def RemoveExactDuplicates(documents: beam.PCollection) -> beam.pvalue.DoOutputsTuple:
    """Returns outputs with the unique documents as main output and EVENTS_TAG events."""
    return (
        documents
        | "ByContentHash" >> beam.Map(lambda doc: (hashlib.sha256(doc.text.encode("utf-8")).digest(), doc))
        | "GroupIdentical" >> beam.GroupByKey()
        | "KeepFirst" >> beam.FlatMap(_keep_first).with_outputs(EVENTS_TAG, main="documents")
    )
