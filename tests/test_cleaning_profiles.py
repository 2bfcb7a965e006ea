"""Cleaning profiles: the default (`curated`) keeps corpora a team chose on purpose, `web` applies
every web-crawl rule, `off` none, and a rule option set explicitly wins over the profile.

The corpora are built in code (`curation_corpora`): Chinese and English poems, the bundled support
replies, Python source files and a dialogue of short speeches. Measured here with the default
profile every document of each is kept; under `web` about half of the poems (the English ones:
short lines, no line punctuation) and four in five speeches (too few English stop words) go.
"""

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from components.example_gen.cleaning import language, quality
from components.example_gen.cleaning.transforms import CleanDocuments
from components.example_gen.options import CleaningOptions, QualityOptions
from components.example_gen.records import Document
from pipeline.config import load_config
from tests import curation_corpora

CORPORA = {
    "poetry": lambda: curation_corpora.poetry(200),
    "support_replies": lambda: curation_corpora.support_replies(300),
    "python_sources": lambda: curation_corpora.python_sources(40),
    "dialogue": lambda: curation_corpora.dialogue(200),
}


def test_curated_is_the_default_and_keeps_only_the_rules_for_garbage():
    curated = CleaningOptions().quality
    assert CleaningOptions().profile == "curated"
    assert curated.reject_lorem_ipsum and curated.min_alpha_words_fraction == 0.25
    assert (curated.min_stop_words, curated.max_short_lines_fraction, curated.min_words) == (0, 0.0, 0)
    assert CleaningOptions(profile="web").quality == QualityOptions()  # the published thresholds
    assert CleaningOptions(profile="off").quality.enabled is False


def test_a_rule_option_set_explicitly_wins_over_the_profile_in_every_layer():
    assert CleaningOptions(quality=QualityOptions(min_stop_words=2)).quality.min_stop_words == 2
    assert CleaningOptions(quality=QualityOptions(min_stop_words=2)).quality.max_short_lines_fraction == 0.0
    config = load_config(overrides=["cleaning.quality.max_short_lines_fraction=0.5"])
    assert (config.cleaning.quality.max_short_lines_fraction, config.cleaning.quality.min_stop_words) == (0.5, 0)
    web = load_config(overrides=["cleaning.profile=web", "cleaning.quality.min_stop_words=0"]).cleaning.quality
    assert (web.min_stop_words, web.max_short_lines_fraction) == (0, 0.67)
    assert load_config(overrides=["cleaning.profile=off", "cleaning.quality.enabled=true"]).cleaning.quality.enabled
    # The options cross to the executor as JSON with every key: the resolved values survive.
    curated = CleaningOptions(quality=QualityOptions(min_stop_words=2))
    assert CleaningOptions.from_parameter(curated.to_parameter()) == curated


def _assert_keeps(documents, options, share):
    """CleanDocuments (every step, dedup included) on Beam's DirectRunner keeps at least `share`."""

    def at_least(counts):
        assert counts[0] >= share * len(documents), f"kept {counts[0]} of {len(documents)}"

    with TestPipeline() as pipeline:
        kept = (
            pipeline
            | beam.Create([Document(text, "corpus", line) for line, text in enumerate(documents, 1)])
            | CleanDocuments(options)
        )["documents"]
        assert_that(kept | beam.combiners.Count.Globally(), at_least)


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_the_default_profile_keeps_at_least_95_percent_of_a_corpus_chosen_on_purpose(name):
    _assert_keeps(CORPORA[name](), CleaningOptions(), 0.95)


def _kept_by_rules(documents, options):
    return sum(quality.check(text, options, language.identify(text).code).rule is None for text in documents)


def test_the_web_profile_still_removes_what_its_rules_were_made_for():
    poems, speeches = CORPORA["poetry"](), CORPORA["dialogue"]()
    web = CleaningOptions(profile="web").quality
    assert _kept_by_rules(poems, web) < 0.6 * len(poems)  # the English poems' short lines
    assert _kept_by_rules(speeches, web) < 0.5 * len(speeches)  # too few English stop words
    assert _kept_by_rules(curation_corpora.chinese_poems(50), web) == 50  # exempt: written without spaces


GARBAGE = [
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.",
    "$$$ ### 1234 %%% 5678 &&& !!! 0000 *** @@@ 9999 ^^^ 4242",
    "buy now buy now buy now buy now buy now buy now buy now buy now",
    "\n".join(["CLICK HERE FOR THE BEST DEALS ON THE WEB TODAY"] * 5),
]


@pytest.mark.parametrize(
    "text, rule", zip(GARBAGE, ["lorem_ipsum", "alpha_words", "top_2gram", "duplicate_line_chars"])
)
def test_the_default_profile_removes_garbage_in_any_corpus(text, rule):
    assert quality.failed_rule(text, CleaningOptions().quality, "en") == rule
