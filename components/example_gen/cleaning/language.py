"""Language identification with py3langid (its model ships in the wheel: nothing is downloaded).

The identifier is loaded once per process, on first use, so Beam workers pay for it once.
Scoring uses only the model rows of the byte n-gram features a document has: py3langid's own
`classify` multiplies the full 7,480 x 97 feature matrix for every document (a dense
matrix-vector product that dominated its time on short documents: benchmarks/README.md,
"Curation filters"); the sparse product gives the same log-probabilities.
"""

from typing import NamedTuple, Optional

import numpy as np

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
    model = identifier or _get_identifier()
    features = model.instance2fv(sample)
    present = np.flatnonzero(features)
    log_probabilities = features[present].astype(np.float64) @ model.nb_ptc[present] + model.nb_pc
    probabilities = model.norm_probs(log_probabilities)
    best = int(np.argmax(probabilities))
    return Language(model.nb_classes[best], float(probabilities[best]))
