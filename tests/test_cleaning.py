"""Cleaning: the per-document steps, and exact / near-duplicate removal on Beam's DirectRunner."""

import functools
import unicodedata

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from components.example_gen.cleaning import minhash, text_steps
from components.example_gen.cleaning.exact_dedup import KeepFirst
from components.example_gen.cleaning.transforms import CleanDocuments
from components.example_gen.options import CleaningOptions, DecontaminationOptions, QualityOptions
from components.example_gen.records import Document

# The curation filters (tests/test_curation.py) are off here, so each test sees only its step.
NO_CURATION = dict(
    language_id=False, quality=QualityOptions(enabled=False), decontamination=DecontaminationOptions(enabled=False)
)


def _clean(documents, kept, events, **options):
    """Runs CleanDocuments and asserts the kept texts and the (kind, location) events, any order."""
    with TestPipeline() as pipeline:
        outputs = pipeline | beam.Create(documents) | CleanDocuments(CleaningOptions(**{**NO_CURATION, **options}))
        texts = outputs["documents"] | "Texts" >> beam.Map(lambda document: document.text)
        assert_that(texts, equal_to(kept), label="KeptDocuments")
        assert_that(outputs["events"], equal_to(events), label="Events")


def test_unicode_normalization_forms():
    assert text_steps.normalize_unicode("Zoe\u0301", "NFC") == ("Zoé", True)
    assert text_steps.normalize_unicode("ﬁ ①", "NFKC") == ("fi 1", True)
    assert text_steps.normalize_unicode("ﬁ", "NFC") == ("ﬁ", False)
    assert text_steps.normalize_unicode("Zoe\u0301", "none") == ("Zoe\u0301", False)


def test_control_characters_are_removed_but_newlines_and_tabs_kept():
    assert text_steps.remove_control_chars("a\x07b\r\nc\td\x1b\x85") == ("ab\nc\td", True)
    assert text_steps.remove_control_chars("plain\nand\ttab") == ("plain\nand\ttab", False)


def test_control_character_pattern_is_exactly_unicode_category_cc_minus_newline_and_tab():
    every_code_point = "".join(map(chr, range(0x110000)))
    expected = "".join(ch for ch in every_code_point if ch in "\n\t" or unicodedata.category(ch) != "Cc")
    assert text_steps.remove_control_chars(every_code_point) == (expected, True)


def test_pii_is_replaced_by_placeholders():
    text = "Mail jo.doe+x@example.co.uk or call +44 20 7946 0958; card 4111 1111 1111 1111, order 1234 5678 9012 3456."
    scrubbed, kinds = text_steps.scrub_pii(text)
    assert scrubbed == "Mail <EMAIL> or call <PHONE>; card <CARD_NUMBER>, order 1234 5678 9012 3456."
    assert kinds == ("email", "card", "phone")
    assert text_steps.scrub_pii("version 1.2.3 on 2024-05-01") == ("version 1.2.3 on 2024-05-01", ())


def test_national_ids_are_scrubbed_and_numbers_that_only_look_like_them_are_kept():
    text = "SSN 123-45-6789, NINO AB 12 34 56 C, 身份证 11010519491231002X。"
    scrubbed, kinds = text_steps.scrub_pii(text)
    assert scrubbed == "SSN <NATIONAL_ID>, NINO <NATIONAL_ID>, 身份证 <NATIONAL_ID>。"
    assert kinds == ("national_id",)  # the SSN is not also counted as a phone number
    # A prefix letter NINOs never use and a wrong check character are not IDs; never-issued SSN
    # areas are not IDs either (the phone rule, which takes any 7-15 grouped digits, still may).
    lookalikes = "ref DA 12 34 56 C, 订单 110105194912310021"
    assert text_steps.scrub_pii(lookalikes) == (lookalikes, ())
    assert "national_id" not in text_steps.scrub_pii("build 666-12-3456 and 000-12-3456")[1]


def test_scrubbed_training_text_holds_nothing_the_evaluator_counts_as_a_leak():
    """ExampleGen's scrubber and the Evaluator's leak detector share their patterns (pii_patterns)."""
    from components.evaluator.metrics import pii

    text = (
        "mail a.b@corp.io; card 4111 1111 1111 1111; ssn 123-45-6789; nino QQ123456C is invalid but AB123456C is not; "
        "id 11010519491231002X; call (415) 555-0142 or +44 20 7946 0958"
    )
    assert pii.find_pii(text)
    scrubbed, _ = text_steps.scrub_pii(text)
    assert pii.find_pii(scrubbed) == [], scrubbed


def test_minhash_estimates_jaccard():
    first = minhash.shingles(" ".join(f"w{i}" for i in range(200)), 3)
    second = minhash.shingles(" ".join(f"w{i}" for i in range(20, 220)), 3)
    true = minhash.jaccard(first, second)
    coefficients = minhash.permutations(256, seed=1)
    estimate = (minhash.signature(first, coefficients) == minhash.signature(second, coefficients)).mean()
    assert abs(true - 178 / 218) < 1e-9  # 198 shingles each, 178 shared
    assert abs(estimate - true) < 0.08


def _doc(text, line, source="a.txt", repairs=()):
    return Document(text, source, line, (), repairs)


def test_per_document_steps_and_length_filter_are_counted():
    documents = [
        _doc("Zoe\u0301 says hi", 1, repairs=("invalid_utf8_replaced",)),
        _doc("bell\x07", 2),
        _doc("x", 3),
        _doc("y" * 50, 4),
        _doc("mail me at a@b.org", 5),
    ]
    _clean(
        documents,
        ["Zoé says hi", "bell", "mail me at <EMAIL>"],
        [
            ("removed:too_long", "a.txt:4"),
            ("removed:too_short", "a.txt:3"),
            ("repaired:control_chars_removed", "a.txt:2"),
            ("repaired:invalid_utf8_replaced", "a.txt:1"),
            ("repaired:pii_email_scrubbed", "a.txt:5"),
            ("repaired:unicode_normalized", "a.txt:1"),
        ],
        min_chars=2,
        max_chars=40,
        scrub_pii=True,
        near_dedup=False,
    )


def test_exact_duplicates_removed_keeping_the_first():
    documents = [
        _doc("same text", 9, "b.txt"),
        _doc("same text", 3, "a.txt"),
        _doc("other", 1, "b.txt"),
        _doc("same text", 5, "a.txt"),
    ]
    _clean(
        documents,
        ["other", "same text"],
        [
            ("removed:exact_duplicate", "a.txt:5 (duplicate of a.txt:3)"),
            ("removed:exact_duplicate", "b.txt:9 (duplicate of a.txt:3)"),
        ],
        near_dedup=False,
    )


def test_exact_dedup_combiner_keeps_the_first_whatever_the_partitioning():
    documents = [
        _doc("same", line, source) for source, line in (("b.txt", 1), ("a.txt", 7), ("a.txt", 2), ("c.txt", 4))
    ]
    combiner = KeepFirst()
    outcomes = set()
    for split in range(len(documents) + 1):
        for order in (documents, documents[::-1]):
            parts = [order[:split], order[split:]]
            accumulators = [functools.reduce(combiner.add_input, part, combiner.create_accumulator()) for part in parts]
            first, duplicates = combiner.extract_output(combiner.merge_accumulators(accumulators))
            outcomes.add((first.location, tuple(sorted(duplicates))))
    assert outcomes == {("a.txt:2", (("a.txt", 7), ("b.txt", 1), ("c.txt", 4)))}


BASE = (
    "the quick brown fox jumps over the lazy dog while the farmer sleeps under an old oak tree "
    "and the cows wander slowly across the green field towards the river in the warm afternoon sun"
).split()


def _variant(changed_words):
    """BASE with its last `changed_words` words replaced by distinct new ones."""
    return " ".join(BASE[: len(BASE) - changed_words] + [f"new{i}" for i in range(changed_words)])


@pytest.mark.parametrize("threshold", [0.8, 0.5])
def test_near_duplicates_above_the_threshold_removed_below_kept(threshold):
    near, far = _variant(1), _variant(12)  # Jaccard of 5-word shingles with BASE: 0.94 and 0.45
    similarity = {
        text: minhash.jaccard(minhash.shingles(" ".join(BASE), 5), minhash.shingles(text, 5)) for text in (near, far)
    }
    assert similarity[near] > 0.9 and 0.4 < similarity[far] < 0.5
    documents = [_doc(" ".join(BASE), 1), _doc(near, 3), _doc(far, 5), _doc("an unrelated short note", 7)]
    _clean(
        documents,
        [" ".join(BASE), far, "an unrelated short note"],
        [("removed:near_duplicate", "a.txt:3 (near-duplicate of a.txt:1)")],
        near_dedup_threshold=threshold,
    )


def test_near_duplicate_chains_keep_one_per_cluster_deterministically():
    documents = [_doc(_variant(i), 10 - i) for i in range(4)]  # each differs from its neighbour by one word
    _clean(
        documents,
        [_variant(3)],  # line 7: the first by (source, line)
        [("removed:near_duplicate", f"a.txt:{line} (near-duplicate of a.txt:7)") for line in (8, 9, 10)],
        near_dedup_threshold=0.75,
        exact_dedup=False,
    )
