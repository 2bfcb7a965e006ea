"""Language identification with py3langid (its model ships in the wheel: nothing is downloaded).

The identifier is loaded once per process, on first use, so Beam workers pay for it once.
"""
from typing import NamedTuple, Optional

# Characters read per document: language is settled long before, and cost stays bounded.
MAX_CHARS = 4096
UNKNOWN = "und"  # ISO 639-2 'undetermined', for documents without letters

_identifier = None


class Language(NamedTuple):
    code: str  # ISO 639-1 ('en', 'zh', ...) or UNKNOWN
    confidence: float  # normalised probability of that language, in [0, 1]


def _get_identifier():
    global _identifier
    if _identifier is None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        _identifier = LanguageIdentifier.from_pickled_model(MODEL_FILE, norm_probs=True)
    return _identifier


def identify(text: str, identifier: Optional[object] = None) -> Language:
    """The most likely language of `text` and its probability."""
    sample = text[:MAX_CHARS]
    if not any(char.isalpha() for char in sample):
        return Language(UNKNOWN, 0.0)
    code, probability = (identifier or _get_identifier()).classify(sample)
    return Language(code, float(probability))
