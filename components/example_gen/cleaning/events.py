"""Cleaning and ingestion events: what happened to which record, for the counts in the report.

An event is a `(kind, location)` pair emitted on a tagged side output; kinds are
'quarantined:<reason>', 'repaired:<what>' or 'removed:<why>'.
"""

import apache_beam as beam

EVENTS_TAG = "events"


def event(kind: str, location: str) -> beam.pvalue.TaggedOutput:
    """A tagged event for the `events` side output."""
    return beam.pvalue.TaggedOutput(EVENTS_TAG, (kind, location))
