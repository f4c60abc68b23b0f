"""Scoring Full-Duplex-Bench v3 results: ours, written from what the benchmark's evaluators
compute (`evaluate_tool_calls.py`, `evaluate_pass_rate.py`, `analyze_tool_latency.py`).

Per scenario, from its expected calls and the run's actual ones:
- tool selection: the function names matched as multisets; recall = matched / expected,
  precision = matched / actual (an extra call costs precision), F1 of the two; an empty side
  counts 1.0, as the benchmark's does;
- pairing: each expected call takes the first unused actual call of its function, in order
  (so calls made in another order still pair);
- argument accuracy: the paired calls whose arguments match, over the expected calls (one
  not made scores 0). Exact matching is the benchmark's without its judge: every expected key
  must be there; a value that starts with "$" (a `$RESULT_n...` reference) is not checked;
  text is compared lower-cased, stripped, "_" read as " "; other values as they are.
  `resolved` (ours, stricter) checks a reference too: `$RESULT_n.path` must equal that path
  in the result of the call paired with expected call n. With a judge (judge.py), the judge
  decides, and an unreadable reply falls back to exact matching, as the benchmark's does;
- response accuracy (judge only): does the agent's transcript do what the scenario's last
  "ai" turn says;
- pass (strict): every expected function called and no extra one, then every paired call's
  arguments right; a failure is "wrong tools" or "wrong arguments".
Overall, as the benchmark reports: the continuous scores averaged over the scenarios where
the agent said anything (`turn_taken`; `*_all` over all), the pass rate over all, by domain,
difficulty, number of tools, disfluency feature and state rollback, and the latencies:
first response (agent's first word minus the user's end; negative is an interruption, left
out of the averages), tool call (first call made) and task completion (ours: the agent's
first word after the last call's answer reached it).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.eval.fdb3.layout import find_samples
from app.llm.result_references import MISSING, is_reference, parse_result, resolve

if TYPE_CHECKING:
    from app.eval.fdb3.judge import ToolJudge

ArgumentCheck = Callable[[str, dict, dict], tuple[bool, str]]


def _normal(value: Any) -> Any:
    return value.lower().strip().replace("_", " ") if isinstance(value, str) else value


def exact_arguments(expected: dict, actual: dict) -> tuple[bool, str]:
    for key, wanted in expected.items():
        if key not in actual:
            return False, f"missing argument: {key}"
        if is_reference(wanted):
            continue  # a reference to an earlier result: not checked without resolving
        if _normal(wanted) != _normal(actual.get(key)):
            return False, f"{key}: expected {wanted!r}, got {actual.get(key)!r}"
    return True, "all arguments match"


def resolved_arguments(expected: dict, actual: dict, results: Sequence[Any]
                       ) -> tuple[bool, str]:
    """Exact matching with each `$RESULT_n...` resolved against `results` (the result of
    the actual call paired with expected call n; MISSING where there is none)."""
    for key, wanted in expected.items():
        if key not in actual:
            return False, f"missing argument: {key}"
        if is_reference(wanted):
            value = resolve(wanted, results)
            if value is MISSING:
                return False, f"{key}: {wanted} names nothing (that call did not happen, " \
                              "or its result lacks the field)"
            if _normal(value) != _normal(actual.get(key)):
                return False, f"{key}: {wanted} is {value!r}, got {actual.get(key)!r}"
        elif _normal(wanted) != _normal(actual.get(key)):
            return False, f"{key}: expected {wanted!r}, got {actual.get(key)!r}"
    return True, "all arguments match, references included"


def tool_selection(expected: Sequence[dict], actual: Sequence[dict]) -> dict[str, Any]:
    wanted = Counter(c["function"] for c in expected)
    made = Counter(c["function"] for c in actual)
    matched = sum((wanted & made).values())
    recall = matched / len(expected) if expected else 1.0
    precision = matched / len(actual) if actual else 1.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    return {"score": round(f1, 3), "recall": round(recall, 3),
            "precision": round(precision, 3), "matched": matched,
            "total_expected": len(expected), "total_actual": len(actual),
            "unmatched_expected": sorted((wanted - made).elements()),
            "unexpected_calls": sorted((made - wanted).elements())}


def pair_calls(expected: Sequence[dict], actual: Sequence[dict]) -> list[dict | None]:
    """For each expected call, the first unused actual call of the same function."""
    unused = list(actual)
    pairs: list[dict | None] = []
    for call in expected:
        found = next((a for a in unused if a["function"] == call["function"]), None)
        if found is not None:
            unused.remove(found)
        pairs.append(found)
    return pairs


def _results_by_expected(pairs: Sequence[dict | None]) -> list[Any]:
    return [parse_result(p.get("result", "")) if p is not None and p.get("result") is not None
            else MISSING for p in pairs]


def score_scenario(scenario: dict, result: dict, judge: ToolJudge | None = None
                   ) -> dict[str, Any]:
    expected = list(scenario.get("expected_tool_calls") or [])
    actual = [c for c in result.get("actual_tool_calls") or [] if isinstance(c, dict)
              and "function" in c]
    transcript = str(result.get("transcript") or "")
    selection = tool_selection(expected, actual)
    pairs = pair_calls(expected, actual)
    results = _results_by_expected(pairs)
    details = []
    for call, paired in zip(expected, pairs, strict=True):
        wanted = call.get("args", {}) or {}
        if paired is None:
            details.append({"function": call["function"], "called": False, "exact": False,
                            "resolved": False, "judged": False if judge else None,
                            "why": "not called"})
            continue
        got = paired.get("args", {}) or {}
        exact, why = exact_arguments(wanted, got)
        resolved, resolved_why = resolved_arguments(wanted, got, results)
        detail = {"function": call["function"], "called": True, "exact": exact,
                  "resolved": resolved, "expected_args": wanted, "actual_args": got,
                  "why": why, "why_resolved": resolved_why}
        if judge is not None:
            verdict = judge.arguments(call["function"], wanted, got, results)
            detail["judged"] = exact if verdict.value is None else verdict.value
            detail["judge_said"] = verdict.reply
        details.append(detail)

    def share(key: str) -> float:
        return round(sum(1 for d in details if d[key]) / len(details), 3) if details else 1.0

    response: dict[str, Any] = {"score": None, "explanation": "no judge: not judged"}
    if judge is not None:
        dialogue = scenario.get("dialogue") or [{}]
        intent = str(dialogue[-1].get("ai", "")) if dialogue else ""
        verdict = judge.response(intent, transcript)
        response = {"score": verdict.value if verdict.value is None else float(verdict.value),
                    "explanation": verdict.reply}
    all_tools = not selection["unmatched_expected"] and not selection["unexpected_calls"]
    reason = ""
    if not all_tools:
        parts = []
        if selection["unmatched_expected"]:
            parts.append(f"missing tools: {selection['unmatched_expected']}")
        if selection["unexpected_calls"]:
            parts.append(f"unexpected tools: {selection['unexpected_calls']}")
        reason = "; ".join(parts)
    passes = {}
    for key in ("exact", "resolved") + (("judged",) if judge else ()):
        wrong = [d["function"] for d in details if not d[key]]
        passes[key] = all_tools and not wrong
        if key == ("judged" if judge else "exact"):
            reason = reason or (f"wrong arguments for: {wrong}" if wrong else "")
    return {
        "scenario_id": scenario.get("id"), "domain": scenario.get("domain", "unknown"),
        "difficulty": scenario.get("difficulty", "unknown"), "title": scenario.get("title", ""),
        "num_tools": len(expected), "disfluency": list(scenario.get("disfluency_features") or []),
        "state_rollback": bool(scenario.get("state_rollback_test", False)),
        "turn_taken": bool(transcript.strip()) or bool(result.get("asr_chunks")),
        "tool_selection": selection,
        "arguments": {"exact": share("exact"), "resolved": share("resolved"),
                      "judged": share("judged") if judge else None, "details": details},
        "response": response, "passed": passes,
        "failure": ("" if passes["judged" if judge else "exact"] else
                    ("wrong_tools" if not all_tools else "wrong_arguments")),
        "failure_reason": reason,
        "latency": latencies(result, actual),
    }


def _times(values: Iterable[object]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def latencies(result: dict, actual: Sequence[dict]) -> dict[str, float | None]:
    user_end = result.get("user_speech_end_rel")
    if not isinstance(user_end, (int, float)):
        return {"first_response_s": None, "tool_call_s": None, "task_completion_s": None}
    first_word = result.get("audio_agent_speech_start")
    first_response = round(first_word - user_end, 3) \
        if isinstance(first_word, (int, float)) else None
    made = _times(c.get("called_at", c.get("timestamp_start")) for c in actual)
    tool_call = round(min(made) - user_end, 3) if made else None
    answered = _times(c.get("timestamp_start") for c in actual)
    task = None
    if answered:
        words = [w["timestamp"][0] for w in result.get("asr_chunks") or []
                 if isinstance(w, dict) and w.get("timestamp")]
        after = [t for t in words if t >= max(answered)]
        if after:
            task = round(min(after) - user_end, 3)
    return {"first_response_s": first_response, "tool_call_s": tool_call,
            "task_completion_s": task}


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def _summary(values: Sequence[float]) -> dict[str, Any]:
    return {"n": len(values), "mean": _mean(values),
            "median": round(statistics.median(values), 3) if values else None,
            "std": round(statistics.stdev(values), 3) if len(values) > 1 else None}


def _continuous(rows: Sequence[dict], judged: bool) -> dict[str, float | None]:
    responses = [r["response"]["score"] for r in rows if r["response"]["score"] is not None]
    return {"tool_selection": _mean([r["tool_selection"]["score"] for r in rows]),
            "arguments_exact": _mean([r["arguments"]["exact"] for r in rows]),
            "arguments_resolved": _mean([r["arguments"]["resolved"] for r in rows]),
            "arguments_judged": _mean([r["arguments"]["judged"] for r in rows])
            if judged else None,
            "response": _mean(responses) if judged else None}


def _rate(rows: Sequence[dict], key: str) -> float | None:
    return round(sum(1 for r in rows if r["passed"][key]) / len(rows), 3) if rows else None


def _by(rows: Sequence[dict], group: Callable[[dict], Sequence[str]], key: str,
        judged: bool) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        for name in group(row):
            groups.setdefault(str(name), []).append(row)
    return {name: {"n": len(members), "pass_rate": _rate(members, key),
                   **_continuous(members, judged)} for name, members in sorted(groups.items())}


def aggregate(rows: Sequence[dict], judged: bool) -> dict[str, Any]:
    key = "judged" if judged else "exact"
    taken = [r for r in rows if r["turn_taken"]]
    failures = Counter(r["failure"] for r in rows if r["failure"])
    first = [r["latency"]["first_response_s"] for r in taken
             if r["latency"]["first_response_s"] is not None]
    interruptions = [t for t in first if t < 0]
    return {
        "scenarios": len(rows),
        "turn_taking": {"turn_taken": len(taken), "no_response": len(rows) - len(taken),
                        "turn_take_rate": round(len(taken) / len(rows), 3) if rows else None},
        "by_metric": _continuous(taken, judged),
        "by_metric_all": _continuous(rows, judged),
        "pass_rate": {"strict": _rate(rows, key), "exact": _rate(rows, "exact"),
                      "resolved": _rate(rows, "resolved"),
                      "judged": _rate(rows, "judged") if judged else None,
                      "passed": sum(1 for r in rows if r["passed"][key]),
                      "failed": sum(1 for r in rows if not r["passed"][key]),
                      "failure_breakdown": {"wrong_tools": failures.get("wrong_tools", 0),
                                            "wrong_arguments": failures.get("wrong_arguments",
                                                                            0)}},
        "by_domain": _by(rows, lambda r: [r["domain"]], key, judged),
        "by_difficulty": _by(rows, lambda r: [r["difficulty"]], key, judged),
        "by_num_tools": _by(rows, lambda r: [str(r["num_tools"])], key, judged),
        "by_disfluency": _by(rows, lambda r: r["disfluency"], key, judged),
        "by_state_rollback": _by(rows, lambda r: ["with_rollback" if r["state_rollback"]
                                                  else "without_rollback"], key, judged),
        "latency": {
            "first_response_s": _summary([t for t in first if t >= 0]),
            "interruptions": len(interruptions),
            "interruption_rate": round(len(interruptions) / len(first), 3) if first else None,
            "tool_call_s": _summary([r["latency"]["tool_call_s"] for r in rows
                                     if r["latency"]["tool_call_s"] is not None]),
            "task_completion_s": _summary([r["latency"]["task_completion_s"] for r in rows
                                           if r["latency"]["task_completion_s"] is not None]),
        },
    }


NO_EXPECTED_CALLS = "no expected_tool_calls: give --benchmark benchmark_data_v2.json"


def _nothing_scored(root: Path, provider: str, missing: Sequence[str],
                    no_expected: Sequence[str], unreadable: int, benchmark_given: bool) -> str:
    """Why nothing could be scored, the real reason first: results that exist but whose
    scenarios lack the expected calls are not "no result"."""
    reasons = []
    if no_expected:
        where = ("neither in their metadata.json nor in the --benchmark file" if benchmark_given
                 else "in their metadata.json (the released folders' lack them): give "
                      "--benchmark benchmark_data_v2.json")
        reasons.append(f"{len(no_expected)} result_{provider}.json found, but their "
                       f"scenarios have no expected_tool_calls {where}")
    if unreadable:
        reasons.append(f"{unreadable} result_{provider}.json could not be read")
    if missing:
        reasons.append(f"{len(missing)} sample(s) not run (no result_{provider}.json)")
    if not reasons:
        reasons.append(f"no sample has a result_{provider}.json")
    return f"nothing to score under {root}: " + "; ".join(reasons)


def score_results(root: Path, provider: str, judge: ToolJudge | None = None,
                  benchmark: Path | None = None) -> dict[str, Any]:
    """Every sample's result under `root` scored; the samples not run or not scorable are
    listed with why."""
    samples, left_out = find_samples(root, benchmark)
    rows, missing, unscorable = [], [], []
    no_expected: list[str] = []
    for sample in samples:
        path = sample.result_path(provider)
        if not path.is_file():
            missing.append(sample.folder.name)
            continue
        if not sample.scenario.get("expected_tool_calls"):
            no_expected.append(sample.folder.name)
            unscorable.append((sample.folder.name, NO_EXPECTED_CALLS))
            continue
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            unscorable.append((sample.folder.name, f"unreadable {path.name}: {exc}"))
            continue
        row = score_scenario(sample.scenario, result, judge)
        row["sample"] = sample.folder.name
        rows.append(row)
    if not rows:
        raise ValueError(_nothing_scored(root, provider, missing, no_expected,
                                         len(unscorable) - len(no_expected),
                                         benchmark is not None))
    return {"provider": provider, "judge": judge.name if judge else None,
            "overall": aggregate(rows, judge is not None), "scenarios": rows,
            "not_run": missing, "not_scored": unscorable + list(left_out)}
