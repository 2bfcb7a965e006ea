"""`CleanDocuments`: every cleaning step in order, as one Beam PTransform.

Runs inside the ExampleGen executor (so cleaning scales with the same runner and its counts land
on the Examples artifact), and is usable on its own on any PCollection of `Document`s.
"""

from typing import Tuple

import apache_beam as beam

from components.example_gen.cleaning import decontamination, quality
from components.example_gen.cleaning.curation_steps import REMOVED_TAG, CurateEachDocument, RemoveToxicDocuments
from components.example_gen.cleaning.document_steps import CleanEachDocument
from components.example_gen.cleaning.events import EVENTS_TAG
from components.example_gen.cleaning.exact_dedup import RemoveExactDuplicates
from components.example_gen.cleaning.near_dedup import RemoveNearDuplicates
from components.example_gen.options import CleaningOptions

# Documents per toxicity classifier call (Beam adapts the size between these to the call's cost).
TOXICITY_MIN_BATCH, TOXICITY_MAX_BATCH = 16, 512


def enabled_removal_rules(options: CleaningOptions) -> Tuple[str, ...]:
    """The `removed:<rule>` names every enabled filter can count, in pipeline order (so a report
    can show the filters that removed nothing too); a quality rule the profile or a threshold of 0
    switched off is not one."""
    rules = ["too_short", "too_long"]
    if options.languages:
        rules.append("language_not_kept")
    rules += [f"quality_{rule}" for rule in quality.enabled_rules(options.quality)]
    if options.decontamination.enabled:
        rules.append("eval_contamination")
    if options.toxicity_threshold:
        rules.append("toxic")
    if options.exact_dedup:
        rules.append("exact_duplicate")
    if options.near_dedup:
        rules.append("near_duplicate")
    return tuple(rules)


def _first_by_position(rule_and_documents):
    rule, documents = rule_and_documents
    return [(rule, document) for document in documents]


class CleanDocuments(beam.PTransform):
    """Documents in; a dict out: 'documents' (the cleaned, kept ones), 'events' (what each
    step changed or removed, as (kind, location) pairs) and 'removed_samples' ((rule, Document)
    pairs: the first `removed_samples_per_rule` documents by position that each curation rule
    removed)."""

    def __init__(self, options: CleaningOptions):
        super().__init__()
        self._options = options
        decontaminate = options.decontamination
        self._suite = decontamination.load_suites(decontaminate) if decontaminate.enabled else {}

    def expand(self, documents):
        events = []
        cleaned = documents | "EachDocument" >> beam.ParDo(CleanEachDocument(self._options)).with_outputs(
            EVENTS_TAG, main="documents"
        )
        curated = cleaned.documents | "Curate" >> beam.ParDo(
            CurateEachDocument(self._options, self._suite)
        ).with_outputs(EVENTS_TAG, REMOVED_TAG, main="documents")
        documents, events, removed = (
            curated.documents,
            [cleaned[EVENTS_TAG], curated[EVENTS_TAG]],
            [curated[REMOVED_TAG]],
        )
        if self._options.toxicity_threshold:
            screened = (
                documents
                | "BatchForToxicity"
                >> beam.BatchElements(min_batch_size=TOXICITY_MIN_BATCH, max_batch_size=TOXICITY_MAX_BATCH)
                | "RemoveToxic"
                >> beam.ParDo(RemoveToxicDocuments(self._options.toxicity_threshold)).with_outputs(
                    EVENTS_TAG, REMOVED_TAG, main="documents"
                )
            )
            documents = screened.documents
            events.append(screened[EVENTS_TAG])
            removed.append(screened[REMOVED_TAG])
        samples = (
            tuple(removed)
            | "AllRemoved" >> beam.Flatten()
            | "FirstRemovedPerRule"
            >> beam.combiners.Top.PerKey(
                self._options.removed_samples_per_rule, key=lambda document: document.sort_key(), reverse=True
            )
            | "RemovedSamples" >> beam.FlatMap(_first_by_position)
        )
        if self._options.exact_dedup:
            unique = documents | "ExactDedup" >> RemoveExactDuplicates()
            documents = unique.documents
            events.append(unique[EVENTS_TAG])
        if self._options.near_dedup:
            distinct = documents | "NearDedup" >> RemoveNearDuplicates(self._options)
            documents = distinct.documents
            events.append(distinct[EVENTS_TAG])
        return {
            "documents": documents,
            "events": tuple(events) | "AllEvents" >> beam.Flatten(),
            "removed_samples": samples,
        }
