"""The trained English toxicity classifier shared by ExampleGen's toxicity filter and the
Evaluator's default safety scorer.

It is alt-profanity-check's linear SVM over TF-IDF character/word features, trained on labelled
toxic and benign comments; the model ships inside the wheel, so nothing is downloaded. The
model was pickled with scikit-learn 1.5.0 and is loaded with the locked 1.5.1 (same minor
release); scikit-learn's version warning about that is silenced here on purpose.
"""

import warnings
from typing import List, Sequence

_predict_prob = None


def _load():
    global _predict_prob
    if _predict_prob is None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Trying to unpickle estimator")
            from profanity_check import predict_prob

        _predict_prob = predict_prob
    return _predict_prob


def toxicity_probabilities(texts: Sequence[str]) -> List[float]:
    """The classifier's probability that each text is offensive, in [0, 1]."""
    if not texts:
        return []
    return [float(p) for p in _load()(list(texts))]
