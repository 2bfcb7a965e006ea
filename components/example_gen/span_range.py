"""Ingesting a range of spans in one ExampleGen execution.

TFX's FileBasedExampleGen driver selects one span (the latest, or `example_gen.span`) and hands
the executor that span's resolved file pattern. With `example_gen.first_span`, the executor also
reads every earlier span from `first_span` on, resolving each one's files with TFX's own span
matching (`{SPAN}`, `{SPAN:width}`, `{YYYY}{MM}{DD}`). Spans without files in the range (a missed
daily drop) are skipped and the spans actually read are recorded on the artifact.

The driver fingerprints only the selected span's files for caching: earlier spans are treated
as immutable drops. After rewriting an old span, run with `--no-cache`.
"""

from typing import Iterator, Optional, Tuple

from tfx.components.example_gen import utils as example_gen_utils
from tfx.proto import example_gen_pb2, range_config_pb2


def resolve_span_pattern(input_base: str, pattern: str, span: int) -> Optional[str]:
    """`pattern` with its span (or date) placeholders filled for `span`; None when no file of
    that span exists."""
    split = example_gen_pb2.Input.Split(name="corpus", pattern=pattern)
    only_this_span = range_config_pb2.RangeConfig(
        static_range=range_config_pb2.StaticRange(start_span_number=span, end_span_number=span)
    )
    try:
        example_gen_utils.calculate_splits_fingerprint_span_and_version(input_base, [split], only_this_span)
    except ValueError:  # TFX: "Cannot find matching for split ..."
        return None
    return split.pattern


def earlier_spans(input_base: str, pattern: str, first_span: int, selected_span: int) -> Iterator[Tuple[int, str]]:
    """(span, resolved pattern) of every span in [first_span, selected_span) that has files."""
    if first_span > selected_span:
        raise ValueError(f"example_gen.first_span={first_span} is after the selected span {selected_span}")
    for span in range(first_span, selected_span):
        resolved = resolve_span_pattern(input_base, pattern, span)
        if resolved is not None:
            yield span, resolved
