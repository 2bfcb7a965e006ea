"""A gate's outcome: the measured value, its threshold, the verdict and why."""
import json
from dataclasses import asdict, dataclass
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


def blessing_reason(gates: Sequence[GateResult]) -> str:
    """'all N gates passed' or the failed gates' reasons, joined."""
    failed = [gate for gate in gates if not gate.passed]
    if not failed:
        ran = sum(not gate.skipped for gate in gates)
        return f"all {ran} gates passed ({len(gates) - ran} skipped)"
    return "; ".join(f"{gate.name}: {gate.reason}" for gate in failed)


def gates_json(gates: List[GateResult]) -> str:
    """Compact JSON of every gate, for an MLMD custom property."""
    return json.dumps([gate.to_dict() for gate in gates], ensure_ascii=False)
