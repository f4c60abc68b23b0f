"""`eval qa`'s outputs: results.json (every row and metric), results.md (a table beside the
paper's numbers) and results.png (chart.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from app.eval.chart import SetBars, draw_chart
from app.eval.paper_numbers import PAPER_NOTE, paper_numbers
from app.eval.qa_score import ArmResult


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}"


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def markdown_table(results: list[ArmResult], judge: str) -> str:
    lines = [
        f"Spoken QA, judged by {judge}. Percentages; latencies in seconds of conversation "
        "time (frames); unscored = items the judge could not score (empty answer / "
        "unreadable verdict / not attempted), left out of the averages. ret_rate counts "
        "retrievals whose answer came back; one still in flight when the input ended is "
        "listed below, not counted (the reference records none). Question ends are to "
        "0.01 s, as the reference's.",
        "",
        "| set | arm | n | ref | resp | P(resp\\|ref) | ret_rate | span_rate | ret_lat_s "
        "| inj_lat_s | unscored | paper Gemma 4 ref/resp | paper GPT-4.1 ref/resp |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        s = result.summary
        unscored = sum(s["resp_unscored"].get(k, 0)
                       for k in ("empty", "unreadable", "not_attempted"))
        paper = paper_numbers(result.set_name)
        cells = [f"{_pct(p[0])}/{_pct(p[1])}" if (p := paper.get(b)) else "–"
                 for b in ("Gemma 4", "GPT-4.1")]
        lines.append(
            f"| {result.set_name} | {result.arm} | {s['n']} | {_pct(s['ref'])} | "
            f"{_pct(s['resp'])} | {_pct(s['P(resp|ref)'])} | {_pct(s['ret_rate'])} | "
            f"{_pct(s['span_rate'])} | {_seconds(s['ret_lat_s'])} | "
            f"{_seconds(s['inj_lat_s'])} | {unscored} | {cells[0]} | {cells[1]} |")
    lines += ["", PAPER_NOTE, ""]
    in_flight = [f"- {r.set_name}/{r.arm}: {r.summary['ret_in_flight']} retrieval(s) still in "
                 "flight when the input ended (not in ret_rate)"
                 for r in results if r.summary.get("ret_in_flight")]
    if in_flight:
        lines += ["Retrievals not completed:", "", *in_flight, ""]
    problems = [f"- {r.set_name}/{r.arm}: {p}" for r in results for p in r.problems]
    if problems:
        lines += ["Items left out:", "", *problems, ""]
    return "\n".join(lines)


def write_report(out: Path, results: list[ArmResult], judge: str, judge_samples: int
                 ) -> dict[str, Path]:
    out = Path(out)
    paths = {"json": out / "results.json", "markdown": out / "results.md",
             "chart": out / "results.png"}
    payload = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "judge": judge, "judge_samples": judge_samples,
        "results": [{"set": r.set_name, "arm": r.arm, "judge_prompt": r.judge_kind,
                     "summary": r.summary, "problems": r.problems, "rows": r.rows,
                     "paper": {k: {"ref": v[0], "resp": v[1]}
                               for k, v in paper_numbers(r.set_name).items()}}
                    for r in results],
    }
    paths["json"].write_text(json.dumps(payload, ensure_ascii=False, indent=1),
                             encoding="utf-8")
    paths["markdown"].write_text(markdown_table(results, judge), encoding="utf-8")
    by_set: dict[str, list[ArmResult]] = {}
    latencies: dict[str, list[float]] = {"ret_lat_s": [], "inj_lat_s": []}
    for result in results:
        by_set.setdefault(result.set_name, []).append(result)
        if result.arm != "no-inject":
            for key, series in latencies.items():
                series.extend(row[key] for row in result.rows if key in row)
    bars = [SetBars(name, {r.arm: r.summary["resp"] for r in arms},
                    ref={r.arm: r.summary["ref"] for r in arms},
                    given={r.arm: r.summary["P(resp|ref)"] for r in arms},
                    paper=paper_numbers(name))
            for name, arms in by_set.items()]
    draw_chart(paths["chart"], bars, latencies, f"ContextSpan spoken QA (judge: {judge})")
    return paths
