"""Personal-data patterns shared by ExampleGen's PII scrubbing and the Evaluator's leak detector.

One definition of what a payment card number looks like, so the data that is scrubbed before
training and the generations that are checked after it agree.
"""
import re

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
