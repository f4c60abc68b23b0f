"""The scores of a Full-Duplex-Bench v3 run: `fdb3_scores_<provider>.json` (everything, per
scenario too) and `fdb3_scores_<provider>.md` (the headline beside the paper's numbers, then
by domain and difficulty, the failures and the latencies, each saying what it counts)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from app.eval.paper_numbers import PAPER_FDB3, PAPER_FDB3_NOTE


def _f(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}"


def _s(value: Any) -> str:
    return "–" if value is None else f"{value:.2f} s"


def markdown(scores: dict[str, Any]) -> str:
    overall = scores["overall"]
    judged = scores.get("judge") is not None
    metric, taken = overall["by_metric"], overall["turn_taking"]
    passing = overall["pass_rate"]
    how = f"judge {scores['judge']}" if judged else "exact matching (no judge)"
    lines = [f"# Full-Duplex-Bench v3: {scores['provider']}", "",
             f"{overall['scenarios']} scenario(s) scored; the agent answered in "
             f"{taken['turn_taken']} (turn-take rate {_f(taken['turn_take_rate'])}). "
             f"Arguments and pass rate by {how}.", "",
             "| metric | ours | paper |", "|---|---|---|",
             f"| tool selection (F1) | {_f(metric['tool_selection'])} | "
             f"{PAPER_FDB3['tool_selection']:.3f} |",
             f"| arguments ({'judge' if judged else 'exact'}) | "
             f"{_f(metric['arguments_judged'] if judged else metric['arguments_exact'])} | "
             f"{PAPER_FDB3['arguments']:.3f} |",
             f"| response quality | "
             f"{_f(metric['response']) if judged else 'not judged (give --judge)'} | "
             f"{PAPER_FDB3['response']:.3f} |",
             f"| pass rate (strict) | {_f(passing['strict'])} | {PAPER_FDB3['pass_rate']:.3f} |",
             "", PAPER_FDB3_NOTE, "",
             "Also: arguments exact "
             f"{_f(metric['arguments_exact'])}, with `$RESULT_n` references resolved "
             f"{_f(metric['arguments_resolved'])}; pass rate exact {_f(passing['exact'])}, "
             f"resolved {_f(passing['resolved'])}"
             + (f", judge {_f(passing['judged'])}" if judged else "") + "; over all "
             f"scenarios (silent ones scoring 0): tool selection "
             f"{_f(overall['by_metric_all']['tool_selection'])}, arguments "
             f"{_f(overall['by_metric_all']['arguments_exact'])} (exact).", "",
             f"Passed {passing['passed']}, failed {passing['failed']}: wrong tools "
             f"{passing['failure_breakdown']['wrong_tools']}, wrong arguments "
             f"{passing['failure_breakdown']['wrong_arguments']}.", ""]
    for title, key in (("By domain", "by_domain"), ("By difficulty", "by_difficulty"),
                       ("By number of tools", "by_num_tools"),
                       ("By disfluency", "by_disfluency"),
                       ("By state rollback", "by_state_rollback")):
        lines += [f"## {title}", "", "| | n | pass rate | tool selection | arguments (exact) |"
                  + (" arguments (judge) | response |" if judged else ""),
                  "|---|---|---|---|---|" + ("---|---|" if judged else "")]
        for name, row in overall[key].items():
            line = (f"| {name} | {row['n']} | {_f(row['pass_rate'])} | "
                    f"{_f(row['tool_selection'])} | {_f(row['arguments_exact'])} |")
            if judged:
                line += f" {_f(row['arguments_judged'])} | {_f(row['response'])} |"
            lines.append(line)
        lines.append("")
    latency = overall["latency"]
    lines += ["## Latencies (seconds from the end of the user's first turn)", "",
              "| | n | mean | median |", "|---|---|---|---|"]
    for name, key, what in (
            ("first response", "first_response_s", "the agent's first word; interruptions "
                                                   "left out"),
            ("tool call", "tool_call_s", "the first tool call made"),
            ("task completion", "task_completion_s", "the agent's first word after the "
                                                     "last call's answer reached it")):
        row = latency[key]
        lines.append(f"| {name} ({what}) | {row['n']} | {_s(row['mean'])} | "
                     f"{_s(row['median'])} |")
    lines += ["", f"Interruptions (the agent spoke before the user ended): "
                  f"{latency['interruptions']} (rate {_f(latency['interruption_rate'])}).", ""]
    if scores.get("not_run") or scores.get("not_scored"):
        lines += ["## Not scored", ""]
        lines += [f"- {name}: not run" for name in scores.get("not_run", [])]
        lines += [f"- {name}: {why}" for name, why in scores.get("not_scored", [])]
        lines.append("")
    lines += ["Our scorer, written from the benchmark's evaluators (docs/fdb3.md): the "
              "agent's words are the speech model's text stream, the mock APIs and the "
              "prompts are ours, the latencies are conversation time at the 1.0x frame "
              "clock.", ""]
    return "\n".join(lines)


def write_report(root: Path, provider: str, scores: dict[str, Any]) -> dict[str, Path]:
    paths = {"json": Path(root) / f"fdb3_scores_{provider}.json",
             "markdown": Path(root) / f"fdb3_scores_{provider}.md"}
    for kind, text in (("json", json.dumps(scores, ensure_ascii=False, indent=1, default=str)),
                       ("markdown", markdown(scores))):
        partial = paths[kind].with_name(f".{paths[kind].name}.partial")
        partial.write_text(text + "\n", encoding="utf-8")
        os.replace(partial, paths[kind])
    return paths
