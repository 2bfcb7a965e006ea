"""The curation filters as Beam DoFns: `CurateEachDocument` (language identification and the keep
list, quality rules, decontamination against the evaluation suites) per document, and
`RemoveToxicDocuments`, the toxicity filter, per batch of documents (the classifier's fixed cost
per call dominates when it is called one document at a time).

On a conversation, language identification, the quality rules and decontamination judge its
flattened text (all turns: a rule like `too_few_words` would fail a short "Thanks!" turn on its
own, and a suite's prompt counts as contamination in any turn), while the toxicity filter scores
each assistant turn on its own and removes the conversation when any reply scores at or above the
threshold: what the model learns to say is the replies, and a user who writes abusively to a
polite assistant is a conversation worth training on.

Every removal emits a `removed:<rule>` event, and the removed document itself goes to the
REMOVED_TAG output, from which a few per rule are kept in the quarantine for review. Every
document also emits `languages:<code>`, so the report has the language mix of what was read, and
`exempt:quality_<rule>` for each enabled quality rule not made for its language (`quality.check`).
"""

from typing import Iterator, List, Tuple

import apache_beam as beam

from components.example_gen.cleaning import decontamination, language, quality
from components.example_gen.cleaning.events import event
from components.example_gen.options import CleaningOptions
from components.example_gen.records import ASSISTANT, Document

REMOVED_TAG = "removed_documents"
LANGUAGE_GROUP = "languages"
EXEMPT_GROUP = "exempt"  # a quality rule not made for the document's language was not applied


def removed(rule: str, document: Document) -> Iterator[beam.pvalue.TaggedOutput]:
    """The event and the removed-document output for a removal by `rule`."""
    yield event(f"removed:{rule}", document.location)
    yield beam.pvalue.TaggedOutput(REMOVED_TAG, (rule, document))


class CurateEachDocument(beam.DoFn):
    """Labels each document's language and drops those that a curation filter rejects."""

    def __init__(self, options: CleaningOptions, suite: decontamination.SuiteGrams):
        self._options = options
        self._suite = suite
        self._keep = frozenset(options.languages)

    def process(self, document: Document) -> Iterator:
        options = self._options
        if options.language_id:
            found = language.identify(document.text)
            document = document._replace(language=found.code, language_confidence=found.confidence)
            yield event(f"{LANGUAGE_GROUP}:{found.code}", document.location)
            if self._keep and found.code not in self._keep:
                yield from removed("language_not_kept", document)
                return
        rule = None
        if options.quality.enabled:
            rule, exempt = quality.check(document.text, options.quality, document.language)
            for exempt_rule in exempt:
                yield event(f"{EXEMPT_GROUP}:quality_{exempt_rule}", document.location)
        if rule:
            yield from removed(f"quality_{rule}", document)
        elif decontamination.is_contaminated(document.text, self._suite):
            yield from removed("eval_contamination", document)
        else:
            yield document


def is_english_or_unknown(document: Document) -> bool:
    """Whether the (English) toxicity classifier applies: English, or language ID is off."""
    return document.language in ("en", "")


def toxicity_texts(document: Document) -> Tuple[str, ...]:
    """What the toxicity filter scores: a conversation's assistant turns, each on its own, or a
    plain document's text."""
    return document.contents_of((ASSISTANT,)) if document.is_conversation else (document.text,)


class RemoveToxicDocuments(beam.DoFn):
    """Drops English documents the toxicity classifier scores at or above `threshold` (a
    conversation: any of its assistant turns); takes batches of documents (`beam.BatchElements`)
    and scores each batch in one call."""

    def __init__(self, threshold: float):
        self._threshold = threshold

    def setup(self):
        from components.toxicity_model import toxicity_probabilities

        self._toxicity = toxicity_probabilities

    def process(self, batch: List[Document]) -> Iterator:
        owners, texts = [], []
        for index, document in enumerate(batch):
            if is_english_or_unknown(document):
                for text in toxicity_texts(document):
                    owners.append(index)
                    texts.append(text)
        worst = [0.0] * len(batch)
        for index, score in zip(owners, self._toxicity(texts)):
            worst[index] = max(worst[index], float(score))
        for document, score in zip(batch, worst):
            if score >= self._threshold:
                yield from removed("toxic", document)
            else:
                yield document
