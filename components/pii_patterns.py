"""Personal-data patterns shared by ExampleGen's PII scrubbing and the Evaluator's leak detector.

One definition of what a payment card number and a national identity number look like, so the
data that is scrubbed before training and the generations that are checked after it agree.
"""

import re
from typing import Iterator

# 13-19 digits, optionally grouped by single spaces or dashes; confirm with `luhn_valid`.
CARD_NUMBER = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum every payment card number satisfies (`digits`: digits only)."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


# National identity numbers: US Social Security numbers in their dashed form (area 000, 666 and
# 900-999, group 00 and serial 0000 are never issued), UK National Insurance numbers (prefix
# letters D, F, I, Q, U, V never used; O never second), and Chinese resident identity numbers
# (17 digits and an ISO 7064 MOD 11-2 check character, see `cn_resident_id_valid`).
SSN = re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])")
UK_NINO = re.compile(r"(?<!\w)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D](?!\w)")
CN_RESIDENT_ID = re.compile(r"(?<![\dXx])\d{17}[\dXx](?![\dXx])")


def cn_resident_id_valid(number: str) -> bool:
    """ISO 7064 MOD 11-2 check character of an 18-character Chinese resident identity number."""
    weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
    checksum = sum(int(d) * w for d, w in zip(number[:17], weights)) % 11
    return "10X98765432"[checksum] == number[17].upper()


def national_id_matches(text: str) -> Iterator["re.Match"]:
    """Every national identity number in `text` (Chinese ones only with a valid check character)."""
    for match in CN_RESIDENT_ID.finditer(text):
        if cn_resident_id_valid(match.group(0)):
            yield match
    yield from SSN.finditer(text)
    yield from UK_NINO.finditer(text)
