"""Words for text in any script: `\\w+` runs, except that every CJK character is a unit of its own.

Chinese and Japanese are written without spaces, so a CJK run is not a word: the quality rules and
decontamination count characters there instead (the usual practice for CJK n-gram overlap).
"""

import re
from typing import List

_CJK_RANGES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_CHAR = re.compile(f"[{_CJK_RANGES}]")
_UNIT = re.compile(f"[{_CJK_RANGES}]|[^\\W{_CJK_RANGES}]+")
_LETTER = re.compile(r"[^\W\d_]")


def units(text: str) -> List[str]:
    """The text's words, with each CJK character a word of its own (case kept)."""
    return _UNIT.findall(text)


def cjk_fraction(text: str) -> float:
    """Share of the letters of `text` that are CJK characters (0 for a text without letters)."""
    letters = len(_LETTER.findall(text))
    return len(_CJK_CHAR.findall(text)) / letters if letters else 0.0
