"""The per-document cleaning steps: pure functions from text to (text, changed).

Each is small and independent so the Beam transform can switch it on or off and count it.
"""

import re
import unicodedata
from typing import Tuple

from components.pii_patterns import CARD_NUMBER, luhn_valid, national_id_matches

# Unicode category Cc is exactly U+0000-U+001F and U+007F-U+009F; newline and tab are kept.
_CONTROL_CHARS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def normalize_unicode(text: str, form: str) -> Tuple[str, bool]:
    """NFC/NFKC normalisation ('none' leaves the text alone)."""
    if form == "none" or unicodedata.is_normalized(form, text):
        return text, False
    return unicodedata.normalize(form, text), True


def remove_control_chars(text: str) -> Tuple[str, bool]:
    """Removes C0/C1 control characters (Unicode category Cc) except newline and tab; a CR is
    dropped too, so CRLF text ends up with plain newlines."""
    cleaned = _CONTROL_CHARS.sub("", text)
    return cleaned, len(cleaned) != len(text)


EMAIL_PLACEHOLDER, PHONE_PLACEHOLDER, CARD_PLACEHOLDER = "<EMAIL>", "<PHONE>", "<CARD_NUMBER>"
NATIONAL_ID_PLACEHOLDER = "<NATIONAL_ID>"

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
# An optional +country code, an optional (area) code, then 6-12 more digits in groups.
_PHONE = re.compile(r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){1,3}(?!\w)")


def _replace_cards(match: "re.Match") -> str:
    digits = re.sub(r"\D", "", match.group(0))
    return CARD_PLACEHOLDER if luhn_valid(digits) else match.group(0)


_DATE = re.compile(r"\d{4}[-./]\d{1,2}[-./]\d{1,2}|\d{1,2}[-./]\d{1,2}[-./]\d{2,4}")


def _replace_phones(match: "re.Match") -> str:
    digits = sum(char.isdigit() for char in match.group(0))
    if _DATE.fullmatch(match.group(0)):
        return match.group(0)
    return PHONE_PLACEHOLDER if 7 <= digits <= 15 else match.group(0)


def _replace_national_ids(text: str) -> str:
    """`text` with every national identity number (`pii_patterns.national_id_matches`) replaced."""
    spans = sorted((match.start(), match.end()) for match in national_id_matches(text))
    pieces, end = [], 0
    for start, stop in spans:
        if start >= end:  # matches of different kinds never overlap in practice; keep the first
            pieces += [text[end:start], NATIONAL_ID_PLACEHOLDER]
            end = stop
    return "".join(pieces) + text[end:]


def scrub_pii(text: str) -> Tuple[str, Tuple[str, ...]]:
    """Replaces e-mail addresses, national identity numbers (US SSN, UK NINO, Chinese resident ID
    with a valid check character), payment card numbers (Luhn-valid) and phone numbers with
    placeholders, in that order, so an ID is not taken for a phone or card number; returns the
    text and the kinds of PII found ('email', 'national_id', 'card', 'phone')."""
    found = []
    for kind, replace in (
        ("email", lambda t: _EMAIL.sub(EMAIL_PLACEHOLDER, t)),
        ("national_id", _replace_national_ids),
        ("card", lambda t: CARD_NUMBER.sub(_replace_cards, t)),
        ("phone", lambda t: _PHONE.sub(_replace_phones, t)),
    ):
        scrubbed = replace(text)
        if scrubbed != text:
            found.append(kind)
            text = scrubbed
    return text, tuple(found)
