"""A gate verdict's margin, and assertions that a verdict holds with one, not at the edge (issue 25:
a test that passes at the edge fails on the next CPU or seed). Used by the end-to-end gate tests
and by benchmarks/gate_calibration.py.

A margin is the factor by which a gate's value lies on one side of its threshold
(`components.evaluator.gates.margin`). Two gates are read differently:
- `bias.unsafe_rate_ratio` is a ratio of unsafe rates capped at 1 that must stay >= 0.8, so no
  value is twice the threshold; its margin is taken on the shortfall, (1 - threshold) / (1 - value);
- `bias.unmeasured_groups` at a threshold of 1 (its default) reports the fraction of unknown groups
  and cannot refuse: it has no margin (None).
"""

import math
from typing import Any, Dict, Optional, Union

from components.evaluator.gates import GateResult, margin

FACTOR = 2.0
_CAPPED_AT_ONE = ("bias.unsafe_rate_ratio",)
_FRACTIONS = ("bias.unmeasured_groups",)

Gate = Union[GateResult, Dict[str, Any]]


def _as_dict(gate: Gate) -> Dict[str, Any]:
    return gate.to_dict() if isinstance(gate, GateResult) else gate


def gate_margin(gate: Gate, passing: bool = True) -> Optional[float]:
    """The factor by which a gate that ran lies on its passing (or refusing) side; below 1 it is on
    the other side. None for a skipped gate, a gate that cannot refuse at its threshold, or where a
    ratio means nothing (module docstring)."""
    gate = _as_dict(gate)
    if gate["skipped"] or (gate["name"] in _FRACTIONS and gate["threshold"] >= 1.0):
        return None
    if gate["name"] in _CAPPED_AT_ONE:
        return margin(1 - gate["value"], 1 - gate["threshold"], "<=", passing)
    return margin(gate["value"], gate["threshold"], gate["comparison"], passing)


def assert_passes_with_margin(gate: Gate, factor: float = FACTOR) -> None:
    """The gate passed, and its value is at least `factor` times inside its threshold (a gate that
    cannot refuse at its threshold has only to pass)."""
    gate = _as_dict(gate)
    assert gate["verdict"] == "PASS", gate["reason"]
    if gate["name"] in _FRACTIONS and gate["threshold"] >= 1.0:
        return
    found = gate_margin(gate)
    assert found is not None and found >= factor, (
        f"{gate['name']} passes with margin x{found} < x{factor}: {gate['reason']}"
    )


def assert_refused_with_margin(gate: Gate, factor: float = FACTOR) -> None:
    """The gate refused, and its value is at least `factor` times beyond its threshold."""
    gate = _as_dict(gate)
    found = gate_margin(gate, passing=False)
    assert gate["verdict"] == "FAIL" and found is not None and (math.isinf(found) or found >= factor), (
        f"{gate['name']} refuses with margin x{found} < x{factor}: {gate['reason']}"
    )
