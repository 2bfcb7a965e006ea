"""MinHash signatures of word shingles and their LSH band keys (pure NumPy, deterministic).

`near_dedup.py` runs these inside Beam; keeping the maths here makes it testable on its own.
"""

import re
import zlib
from typing import List, Tuple

import numpy as np

_PRIME = np.uint64((1 << 31) - 1)  # a*x + b stays below 2**63 for a < 2**31 and x < 2**32
_WORD = re.compile(r"\w+")
_BLOCK = 4096  # shingles hashed per step, bounding memory for very long documents


def shingles(text: str, words_per_shingle: int) -> np.ndarray:
    """Sorted unique 32-bit hashes of the lower-cased word n-grams of `text` (a short text is one
    shingle)."""
    words = _WORD.findall(text.lower())
    if len(words) <= words_per_shingle:
        grams = [" ".join(words)]
    else:
        grams = [" ".join(words[i : i + words_per_shingle]) for i in range(len(words) - words_per_shingle + 1)]
    return np.unique(
        np.fromiter((zlib.crc32(gram.encode("utf-8")) for gram in grams), dtype=np.uint64, count=len(grams))
    )


def jaccard(first: np.ndarray, second: np.ndarray) -> float:
    """Jaccard similarity of two sorted unique shingle arrays."""
    if not len(first) and not len(second):
        return 1.0
    common = len(np.intersect1d(first, second, assume_unique=True))
    return common / (len(first) + len(second) - common)


def permutations(count: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """The (a, b) coefficients of `count` universal hash functions (a*x + b) mod p."""
    rng = np.random.RandomState(seed)
    a = rng.randint(1, int(_PRIME), size=count, dtype=np.int64).astype(np.uint64)
    b = rng.randint(0, int(_PRIME), size=count, dtype=np.int64).astype(np.uint64)
    return a, b


def signature(shingle_hashes: np.ndarray, coefficients: Tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The MinHash signature: per hash function, the minimum over all shingles."""
    a, b = coefficients
    result = np.full(len(a), np.iinfo(np.uint64).max, dtype=np.uint64)
    values = shingle_hashes % _PRIME
    for start in range(0, len(values), _BLOCK):
        block = values[start : start + _BLOCK]
        hashed = (a[:, None] * block[None, :] + b[:, None]) % _PRIME
        np.minimum(result, hashed.min(axis=1), out=result)
    return result


def band_keys(minhash: np.ndarray, bands: int) -> List[Tuple[int, bytes]]:
    """One (band index, band bytes) key per band: documents sharing any key are candidates."""
    rows = len(minhash) // bands
    return [(band, minhash[band * rows : (band + 1) * rows].tobytes()) for band in range(bands)]
