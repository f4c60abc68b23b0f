"""The Markdown table of `eval fdb`: our numbers beside the paper's, with what differs."""

from __future__ import annotations

from pathlib import Path

# The Context Spanning reference's reported Full-Duplex-Bench v1 numbers (step 5,938; the
# release's README, github.com/mindlogic-ai/Context-Spanning), by task kind, then by a word
# of the task folder's name where the paper gives one number per source set.
PAPER = {
    "pause_handling": {"candor": {"tor": 0.824}, "synthetic": {"tor": 0.861}},
    "smooth_turn_taking": {"": {"tor": 0.899, "latency_s": 0.064}},
    "backchannel": {"": {"tor": 0.782, "frequency": 0.150, "jsd": 0.716}},
    "user_interruption": {"": {"tor": 0.925, "rating": 3.924, "latency_s": 0.598}},
}
BETTER = {  # which way is better, per task kind and metric
    ("pause_handling", "tor"): "lower",
    ("backchannel", "tor"): "lower", ("backchannel", "frequency"): "higher",
    ("backchannel", "jsd"): "lower",
    ("smooth_turn_taking", "tor"): "higher", ("smooth_turn_taking", "latency_s"): "lower",
    ("user_interruption", "tor"): "higher", ("user_interruption", "rating"): "higher",
    ("user_interruption", "latency_s"): "lower",
}
LABELS = {"tor": "TOR", "latency_s": "latency (s)", "rating": "relevance (0-5)",
          "frequency": "frequency (/s)", "jsd": "JSD"}
ASR_NOTICE = (
    "These numbers are computed by ContextSpan's own code from its own listeners: word "
    "timestamps from our streaming STT (`{asr}`) and Silero VAD segments. Full-Duplex-Bench's "
    "own scoring transcribes the replies with another ASR, NVIDIA parakeet-tdt-0.6b-v2 "
    "(`get_transcript/asr.py`; its first release used CrisperWhisper), and rates relevance "
    "with GPT-4-turbo (its code; GPT-4o in its paper) and its own prompt. The definitions "
    "follow its scripts; the values are not its official numbers.")
OFFICIAL = (
    "The output folders have the benchmark's layout (`<task>/<id>/output.wav` on the input's "
    "timeline, 16-bit mono, beside copies of the sample's files). For the official numbers, "
    "in a checkout of Full-Duplex-Bench: `python v1_v1.5/get_transcript/asr.py --root_dir "
    "{out}/<task> --task default` (`--task user_interruption` for interruption), then, from "
    "`v1_v1.5/evaluation` (it reads `icc_gt_distribution.json` from there), `python "
    "evaluate.py --task <pause_handling|smooth_turn_taking|backchannel|user_interruption> "
    "--root_dir {out}/<task>`. v1.5 folders (with `clean_output.wav`) go to its `behavior`, "
    "`general_before_after` and `get_timing.py` scripts.")


def paper_numbers(kind: str, task: str) -> dict:
    for word, numbers in PAPER.get(kind, {}).items():
        if word in task.lower():
            return numbers
    return {}


def _number(value: object) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def markdown(results: dict, out: Path) -> str:
    lines = ["# Full-Duplex-Bench v1 (ContextSpan's own scoring)", ""]
    lines += [f"> {ASR_NOTICE.format(asr=results['asr'])}", ""]
    render = results.get("render") or {}
    options = render.get("options") or {}
    if options:
        lines.append(f"Rendered with `{options.get('model')}`, seed {options.get('seed')}, "
                     f"{options.get('sample_rate')} Hz output.")
    for note in render.get("notes") or ():
        lines.append(f"Note: {note}.")
    judge = results.get("judge")
    lines.append(f"Relevance judge: {judge} with our prompt." if judge else
                 "Relevance: not judged (pass --judge ollama|openai).")
    if results.get("backchannel_vad"):
        lines.append(f"Backchannel segments: {results['backchannel_vad']}.")
    if not results.get("backchannel_reference"):
        lines.append("Backchannel JSD: not computed (pass --backchannel-reference with the "
                     "benchmark's `icc_gt_distribution.json`).")
    lines += ["", "| task | scored | metric | ours | paper (FDB v1) | better |",
              "|---|---|---|---|---|---|"]
    for task in results["tasks"]:
        kind, name = task["kind"], task["task"]
        paper = paper_numbers(kind, name)
        shown = {k: v for k, v in task["metrics"].items() if k in LABELS}
        if not shown:
            lines.append(f"| {name} | {task['scored']} of {task['rendered']} | ({kind}: not "
                         "scored here) | | | |")
            continue
        for metric, value in shown.items():
            lines.append(f"| {name} | {task['scored']} of {task['rendered']} | "
                         f"{LABELS[metric]} | {_number(value)} | {_number(paper.get(metric))} | "
                         f"{BETTER.get((kind, metric), '')} |")
        if kind == "user_interruption" and task["metrics"].get("unrated"):
            lines.append(f"| {name} | | unrated by the judge (excluded) | "
                         f"{task['metrics']['unrated']} | | |")
    if results.get("skipped"):
        lines += ["", "Skipped samples:"]
        lines += [f"- {s['sample']}: {s['reason']}" for s in results["skipped"]]
    lines += ["", OFFICIAL.format(out=out), ""]
    return "\n".join(lines)
