"""What a verification says: each method's result (`MethodResult`), the rule's verdict (`VerifyResult`: verified,
refuted or unproven, with its proof or counterexample) and `tally`; the cache stores these as JSON.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional


STATUSES = ("verified", "refuted", "unproven")


@dataclass
class MethodResult:
    method: str  # 'bounded' | 'axiomatic'
    status: str  # 'proven' | 'refuted' | 'unknown' | 'skipped'
    detail: str = ""
    time: float = 0.0
    instances: int = 0
    counterexample: Optional[dict] = None
    coverage: str = ""  # bounded: which combinations the instances cover


@dataclass
class VerifyResult:
    rule: str
    status: str  # 'verified' | 'refuted' | 'unproven'
    methods: list = field(default_factory=list)
    time: float = 0.0
    digest: str = ""
    cached: bool = False
    proof: str = ""  # how a verified rule was proven: 'bounded+axiomatic' | 'bounded-only (<why>)'

    @property
    def ok(self) -> bool:
        return self.status == "verified"

    @property
    def counterexample(self) -> Optional[dict]:
        for m in self.methods:
            if m.counterexample:
                return m.counterexample
        return None

    def method(self, name: str) -> Optional[MethodResult]:
        return next((m for m in self.methods if m.method == name), None)

    def reason(self) -> str:
        """One line on why the rule is not verified: its counterexample (instance, detail, input values), else what
        each method that did not prove it says."""
        ce = self.counterexample
        if ce:
            parts = [ce.get("instance", ""), ce.get("detail", "")]
            if ce.get("inputs"):
                parts.append("inputs " + json.dumps(ce["inputs"]))
            return "; ".join(p for p in parts if p)
        return "; ".join(f"{m.method}: {m.detail}" for m in self.methods if m.status != "proven")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("cached")
        return d

    @staticmethod
    def from_dict(d: dict) -> "VerifyResult":
        return VerifyResult(d["rule"], d["status"], [MethodResult(**m) for m in d["methods"]], d["time"],
                            d.get("digest", ""), cached=True, proof=d.get("proof", ""))


def tally(results: Iterable[VerifyResult]) -> Counter:
    """How many results have each status (every status in `STATUSES` is present, 0 when none has it)."""
    out = Counter({s: 0 for s in STATUSES})
    out.update(r.status for r in results)
    return out
