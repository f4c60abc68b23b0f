"""The QA metrics, with the reference scorer's definitions (notes section 11):

- `resp`: the judge on the model's text stream (markers removed); `ref`: the judge on the
  joined texts of the spans that landed (only items with a span have one);
- `P(resp|ref)`: mean resp over items whose ref is 1;
- `ret_rate`: items with at least one completed retrieval (its answer came back: a span, a
  late or empty answer, a failed LLM); one still in flight when the input ended is counted
  apart (`n_ret_in_flight`), as the reference records none for it; `span_rate`: items with
  a span;
- `ret_lat_s`: first span's trigger time minus the question's end; `inj_lat_s`: first span's
  landing minus its trigger (both means over items with a span);
- a verdict of None (nothing to judge), -1 (unreadable judge) or -2 (the answer attempted
  nothing) is left out of the averages and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

from app.eval.judge import NOT_ATTEMPTED, UNREADABLE
from app.eval.qa_events import IN_FLIGHT_OUTCOMES


@dataclass(frozen=True)
class ItemOutcome:
    """An item's run, ready to score: what the judge needs and the trigger events."""

    item_id: str
    question: str
    answer: str
    question_end_s: float
    text: str
    events: tuple[dict, ...]  # qa_events.trigger_events

    @property
    def spans(self) -> list[dict]:
        return [e for e in self.events if e.get("inject")]

    @property
    def completed(self) -> list[dict]:
        """Retrievals whose answer came back before the input ended."""
        return [e for e in self.events if e.get("outcome") not in IN_FLIGHT_OUTCOMES]

    @property
    def reference_text(self) -> str:
        return " ".join(str(e["inject"]) for e in self.spans)


def item_row(outcome: ItemOutcome, resp: int | None, ref: int | None) -> dict:
    """An item's line in results.json. `ref` is None when the item has no span."""
    spans = outcome.spans
    row: dict = {"id": outcome.item_id, "resp": resp, "ref": ref if spans else None,
                 "n_span": len(spans), "n_ret": len(outcome.completed),
                 "n_ret_in_flight": len(outcome.events) - len(outcome.completed),
                 "text": outcome.text[:300]}
    if spans:
        first = spans[0]
        row["ret_lat_s"] = round(float(first["t"]) - outcome.question_end_s, 2)
        if first.get("t_inj") is not None:
            row["inj_lat_s"] = round(float(first["t_inj"]) - float(first["t"]), 2)
    return row


def _judged(rows: list[dict], key: str) -> list[int]:
    return [r[key] for r in rows if r.get(key) in (0, 1)]


def _mean(values: Sequence[float]) -> float | None:
    return round(float(mean(values)), 4) if values else None


def summarise(rows: list[dict]) -> dict:
    """The set's metrics from its item rows (fractions, not percentages)."""
    n = len(rows)
    resp, ref = _judged(rows, "resp"), _judged(rows, "ref")
    given = [r["resp"] for r in rows if r.get("ref") == 1 and r.get("resp") in (0, 1)]
    spans = [r for r in rows if r["n_span"]]
    return {
        "n": n,
        "resp": _mean(resp), "n_resp_judged": len(resp),
        "resp_unscored": {"empty": sum(1 for r in rows if r.get("resp") is None),
                          "unreadable": sum(1 for r in rows if r.get("resp") == UNREADABLE),
                          "not_attempted": sum(1 for r in rows
                                               if r.get("resp") == NOT_ATTEMPTED)},
        "ref": _mean(ref), "n_ref_judged": len(ref),
        "ref_unscored": {"empty": sum(1 for r in spans if r.get("ref") is None),
                         "unreadable": sum(1 for r in spans if r.get("ref") == UNREADABLE),
                         "not_attempted": sum(1 for r in spans
                                              if r.get("ref") == NOT_ATTEMPTED)},
        "P(resp|ref)": _mean(given), "n_ref_correct": len(given),
        "ret_rate": round(sum(1 for r in rows if r["n_ret"]) / n, 4) if n else None,
        "ret_in_flight": sum(r.get("n_ret_in_flight", 0) for r in rows),
        "span_rate": round(len(spans) / n, 4) if n else None,
        "ret_lat_s": _mean([r["ret_lat_s"] for r in rows if "ret_lat_s" in r]),
        "inj_lat_s": _mean([r["inj_lat_s"] for r in rows if "inj_lat_s" in r]),
    }
