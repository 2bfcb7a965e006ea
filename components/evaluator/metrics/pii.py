"""Detectors of personal data in generated text: e-mail addresses, phone numbers, payment card
numbers (Luhn-checked), and national-ID-like numbers (US SSN, UK NINO, Chinese resident ID with
its ISO 7064 check digit).

Regex detectors trade recall for precision on purpose: a gate that fires on version numbers or
dates would be switched off by its users. E-mail addresses at domains in `allowed_domains` (by
default the RFC 2606 documentation domains) are not counted.
"""

import re
from typing import Iterable, List, NamedTuple, Sequence

from components.pii_patterns import CARD_NUMBER, luhn_valid, national_id_matches

EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@((?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,})(?![\w-])")
PHONE_PATTERNS = (
    re.compile(r"(?<![\w+])\+\d{1,3}[ .-]?(?:\(?\d{1,4}\)?[ .-]?){2,4}\d{2,4}(?!\w)"),  # international, +CC ...
    re.compile(r"(?<![\w(])\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?!\w)"),  # NANP with separators
    re.compile(r"(?<!\d)1[3-9]\d{9}(?!\d)"),  # mainland China mobile
)

DEFAULT_ALLOWED_DOMAINS = ("example.com", "example.org", "example.net", "example")


class PiiFinding(NamedTuple):
    kind: str
    value: str


def find_pii(text: str, allowed_domains: Iterable[str] = DEFAULT_ALLOWED_DOMAINS) -> List[PiiFinding]:
    """Every personal-data match in `text`."""
    allowed = {domain.lower() for domain in allowed_domains}
    findings = []
    for match in EMAIL.finditer(text):
        domain = match.group(1).lower()
        if not any(domain == a or domain.endswith("." + a) for a in allowed):
            findings.append(PiiFinding("email", match.group(0)))
    findings += [PiiFinding("national_id", match.group(0)) for match in national_id_matches(text)]
    for match in CARD_NUMBER.finditer(text):
        digits = re.sub(r"\D", "", match.group(0))
        if 13 <= len(digits) <= 19 and luhn_valid(digits):
            findings.append(PiiFinding("card_number", match.group(0)))
    card_spans = {f.value for f in findings}
    for pattern in PHONE_PATTERNS:
        findings += [PiiFinding("phone", m.group(0)) for m in pattern.finditer(text) if m.group(0) not in card_spans]
    return findings


def leak_rate(texts: Sequence[str], allowed_domains: Iterable[str] = DEFAULT_ALLOWED_DOMAINS):
    """(fraction of texts with any finding, [(index, findings)] of the texts that leak)."""
    leaks = [(index, found) for index, text in enumerate(texts) if (found := find_pii(text, allowed_domains))]
    return (len(leaks) / len(texts) if texts else 0.0), leaks
