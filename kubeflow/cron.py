"""Validation of the cron expressions KFP recurring runs accept.

KFP's scheduled-workflow controller parses `cron_schedule.cron` with robfig/cron's six-field
syntax, seconds first: `SECOND MINUTE HOUR DAY-OF-MONTH MONTH DAY-OF-WEEK` (e.g. `0 0 2 * * *` is
02:00 daily, `0 0 9 ? * 2-6` is 09:00 Monday-Friday... counting Sunday as 0), plus the descriptors
`@yearly @annually @monthly @weekly @daily @midnight @hourly` and `@every <duration>`. A five-field
Unix cron is a common mistake here (it would silently shift every field), so it is rejected with
a hint rather than guessed at.
"""

import re
from typing import Dict, Tuple

_MONTHS = {
    name: index
    for index, name in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"], start=1
    )
}
_DAYS = {name: index for index, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
# (name, lowest, highest, names, allows '?')
_FIELDS: Tuple[Tuple[str, int, int, Dict[str, int], bool], ...] = (
    ("second", 0, 59, {}, False),
    ("minute", 0, 59, {}, False),
    ("hour", 0, 23, {}, False),
    ("day-of-month", 1, 31, {}, True),
    ("month", 1, 12, _MONTHS, False),
    ("day-of-week", 0, 6, _DAYS, True),
)
_DESCRIPTORS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
_GO_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$")


class CronError(ValueError):
    """A cron expression KFP would reject (or misread)."""


def _value(token: str, field: Tuple) -> int:
    name, low, high, names, _ = field
    number = names.get(token.upper()) if not token.isdigit() else int(token)
    if number is None:
        raise CronError(
            f"{name} field: '{token}' is not a number" + (f" or one of {', '.join(names)}" if names else "")
        )
    if not low <= number <= high:
        raise CronError(f"{name} field: {number} is outside {low}-{high}")
    return number


def _check_field(text: str, field: Tuple) -> None:
    name, _, _, _, allows_any = field
    for part in text.split(","):
        if part == "?" and allows_any:
            continue
        base, slash, step = part.partition("/")
        if slash and (not step.isdigit() or int(step) == 0):
            raise CronError(f"{name} field: step '{step}' in '{part}' must be a positive number")
        if base == "*":
            continue
        start, dash, end = base.partition("-")
        first = _value(start, field)
        if dash and _value(end, field) < first:
            raise CronError(f"{name} field: range '{base}' runs backwards")


def validate_cron(expression: str) -> str:
    """Returns `expression` stripped if KFP accepts it; raises CronError naming the problem."""
    expression = " ".join(expression.split())
    if expression.startswith("@"):
        if expression in _DESCRIPTORS:
            return expression
        every, _, duration = expression.partition(" ")
        if every == "@every" and _GO_DURATION.match(duration):
            return expression
        raise CronError(f"unknown cron descriptor '{expression}' (use one of {sorted(_DESCRIPTORS)} or '@every 1h30m')")
    fields = expression.split(" ")
    if len(fields) == 5:
        raise CronError(f"'{expression}' has 5 fields; KFP cron has 6 with seconds first, e.g. '0 {expression}'")
    if len(fields) != 6:
        raise CronError(
            f"'{expression}' has {len(fields)} fields; KFP cron needs 6: second minute hour "
            "day-of-month month day-of-week"
        )
    for text, field in zip(fields, _FIELDS):
        _check_field(text, field)
    return expression
