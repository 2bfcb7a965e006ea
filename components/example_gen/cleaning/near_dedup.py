"""Near-duplicate removal with MinHash + LSH, as Beam transforms that scale with the runner.

    documents -> word shingles -> MinHash signature -> LSH band keys
      -> GroupByKey per band key -> candidate pairs (Distinct)
      -> join both documents' shingles -> exact Jaccard similarity >= threshold -> similar pairs
      -> connected components (union-find over the similar pairs, in one combiner)
      -> keep the first document by (source, line) of each component, drop the rest

A conversation is compared on its text (every turn's words in order, without role names, which
would add the same shingles to every short conversation).

Deterministic: fixed hash seeds, and the kept document is chosen by position, not by arrival
order. The similar-pair graph is gathered in one combiner: its size is the number of
near-duplicate pairs, not the corpus size. Band buckets larger than `MAX_BUCKET_FOR_ALL_PAIRS`
(e.g. boilerplate shared by thousands of documents) pair each member with the bucket's first
member only, which keeps candidate generation linear.
"""

import itertools
from typing import Dict, Iterable, Iterator, List, Tuple

import apache_beam as beam

from components.example_gen.cleaning import minhash
from components.example_gen.cleaning.events import EVENTS_TAG, event
from components.example_gen.options import CleaningOptions
from components.example_gen.records import Document

MAX_BUCKET_FOR_ALL_PAIRS = 64
Key = Tuple[str, int]


class _BandKeys(beam.DoFn):
    """(band key, document key) for every LSH band of a document's MinHash signature."""

    def __init__(self, options: CleaningOptions):
        self._options = options
        self._coefficients = None

    def setup(self):
        self._coefficients = minhash.permutations(self._options.minhash_permutations, self._options.seed)

    def process(self, keyed_shingles) -> Iterator:
        key, shingle_hashes = keyed_shingles
        signature = minhash.signature(shingle_hashes, self._coefficients)
        for band_key in minhash.band_keys(signature, self._options.lsh_bands):
            yield band_key, key


def _candidate_pairs(bucket: Tuple[tuple, Iterable[Key]]) -> Iterator[Tuple[Key, Key]]:
    members = sorted(set(bucket[1]))
    if len(members) <= MAX_BUCKET_FOR_ALL_PAIRS:
        yield from itertools.combinations(members, 2)
    else:
        yield from ((members[0], other) for other in members[1:])


def _attach_first(joined) -> Iterator:
    """(second key, (first key, first shingles)) for each candidate pair of the first document."""
    first, groups = joined
    for first_shingles in groups["shingles"]:
        for second in groups["partners"]:
            yield second, (first, first_shingles)


def _similar_pairs(joined, threshold: float) -> Iterator[Tuple[Key, Key]]:
    second, groups = joined
    for second_shingles in groups["shingles"]:
        for first, first_shingles in groups["firsts"]:
            if minhash.jaccard(first_shingles, second_shingles) >= threshold:
                yield first, second


class _ClusterRepresentatives(beam.CombineFn):
    """Union-find over similar pairs: maps every non-representative key to the first key of its
    component."""

    def create_accumulator(self) -> List[Tuple[Key, Key]]:
        return []

    def add_input(self, pairs, pair):
        pairs.append(pair)
        return pairs

    def merge_accumulators(self, accumulators):
        return [pair for pairs in accumulators for pair in pairs]

    def extract_output(self, pairs) -> Dict[Key, Key]:
        parent: Dict[Key, Key] = {}

        def root(key: Key) -> Key:
            parent.setdefault(key, key)
            while parent[key] != key:
                parent[key] = parent[parent[key]]
                key = parent[key]
            return key

        for first, second in pairs:
            a, b = root(first), root(second)
            if a != b:
                parent[max(a, b)] = min(a, b)
        return {key: root(key) for key in list(parent) if root(key) != key}


def _drop_near_duplicates(document: Document, representative_of: Dict[Key, Key]) -> Iterator:
    kept = representative_of.get(document.sort_key())
    if kept is None:
        yield document
    else:
        yield event("removed:near_duplicate", f"{document.location} (near-duplicate of {kept[0]}:{kept[1]})")


@beam.ptransform_fn
def RemoveNearDuplicates(documents: beam.PCollection, options: CleaningOptions) -> beam.pvalue.DoOutputsTuple:
    """Returns outputs with the kept documents as main output and EVENTS_TAG events."""
    shingles = documents | "Shingles" >> beam.Map(
        lambda doc: (doc.sort_key(), minhash.shingles(doc.text, options.shingle_words))
    )
    candidates = (
        shingles
        | "LshBands" >> beam.ParDo(_BandKeys(options))
        | "GroupByBand" >> beam.GroupByKey()
        | "CandidatePairs" >> beam.FlatMap(_candidate_pairs)
        | "DistinctPairs" >> beam.Distinct()
    )
    firsts = (
        {"shingles": shingles, "partners": candidates}
        | "JoinFirst" >> beam.CoGroupByKey()
        | "AttachFirst" >> beam.FlatMap(_attach_first)
    )
    similar = (
        {"shingles": shingles, "firsts": firsts}
        | "JoinSecond" >> beam.CoGroupByKey()
        | "JaccardCheck" >> beam.FlatMap(_similar_pairs, threshold=options.near_dedup_threshold)
    )
    representatives = similar | "Clusters" >> beam.CombineGlobally(_ClusterRepresentatives())
    return documents | "DropNearDuplicates" >> beam.FlatMap(
        _drop_near_duplicates, representative_of=beam.pvalue.AsSingleton(representatives)
    ).with_outputs(EVENTS_TAG, main="documents")
