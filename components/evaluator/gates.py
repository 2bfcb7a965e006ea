"""A gate's outcome (the measured value, its threshold, the verdict and why) and a gate family's
result (its gates with what it measured, flagged and cost)."""

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict. `skipped` gates do not block the blessing; their reason says why."""

    name: str
    value: Optional[float]
    threshold: float
    passed: bool
    reason: str
    comparison: str = "<="  # how value must relate to threshold to pass (documentation for readers)
    skipped: bool = False

    @classmethod
    def skip(cls, name: str, threshold: float, reason: str) -> "GateResult":
        return cls(name, None, threshold, True, f"skipped: {reason}", skipped=True)

    @property
    def verdict(self) -> str:
        return "SKIPPED" if self.skipped else ("PASS" if self.passed else "FAIL")

    def to_dict(self) -> Dict[str, Any]:
        return dict(asdict(self), verdict=self.verdict)


@dataclass
class FamilyResult:
    """What one gate family (quality, replies, safety, ...) measured and decided: its `gates`, the
    `metrics` written under `metrics[name]` in evaluation.json, the completions it `flagged`, the
    conversations it shows side by side (`samples`), how many items it `scored` (for the log) and
    its wall time in `seconds` (None: it did not run, e.g. a skipped probe)."""

    name: str
    gates: List[GateResult]
    metrics: Dict[str, Any] = field(default_factory=dict)
    flagged: List[Dict[str, Any]] = field(default_factory=list)
    samples: List[Dict[str, Any]] = field(default_factory=list)
    scored: Dict[str, int] = field(default_factory=dict)
    seconds: Optional[float] = None


def upper_bound_gate(name: str, value: float, threshold: float, what: str) -> GateResult:
    """Passes when `value` <= `threshold`; `what` names the measured quantity in the reason."""
    passed = value <= threshold
    reason = f"{what} {value:.4g} {'<=' if passed else '>'} threshold {threshold:.4g}"
    return GateResult(name, float(value), float(threshold), passed, reason, "<=")


def lower_bound_gate(name: str, value: float, threshold: float, what: str) -> GateResult:
    """Passes when `value` >= `threshold`."""
    passed = value >= threshold
    reason = f"{what} {value:.4g} {'>=' if passed else '<'} threshold {threshold:.4g}"
    return GateResult(name, float(value), float(threshold), passed, reason, ">=")


def margin(value: Optional[float], threshold: float, comparison: str, passing: bool = True) -> Optional[float]:
    """How far `value` lies on the passing (or, with `passing=False`, the refusing) side of
    `threshold`, as a factor: threshold / value for a `<=` gate that should pass, value / threshold
    for one that should refuse, the reverse for `>=` (and `>`) gates; below 1 the value is on the
    other side.
    When the value or the threshold is 0 the factor is infinite or 0: a value of 0 is infinitely far
    on the passing side of a `<=` gate (nothing can be better), any value above a threshold of 0
    infinitely far above it. None when a ratio means nothing (no value, a negative value or
    threshold)."""
    if value is None or value < 0 or threshold < 0:
        return None
    if value == 0 or threshold == 0:
        above = value > 0  # then the threshold is 0: the value is infinitely far above it, else below
        on_passing_side = above == comparison.startswith(">")
        return math.inf if on_passing_side == passing else 0.0
    ratio = threshold / value if comparison.startswith("<") else value / threshold
    return ratio if passing else 1 / ratio


def blessing_reason(gates: Sequence[GateResult]) -> str:
    """'all N gates passed' or the failed gates' reasons, joined."""
    failed = [gate for gate in gates if not gate.passed]
    if not failed:
        ran = sum(not gate.skipped for gate in gates)
        return f"all {ran} gates passed ({len(gates) - ran} skipped)"
    return "; ".join(f"{gate.name}: {gate.reason}" for gate in failed)
