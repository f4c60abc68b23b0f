"""The QA chart answers "how far from the paper": ref, resp and P(resp|ref) per arm, with the
paper's ref and resp marked across each set, every one drawn where it says and named in the
legend."""

from __future__ import annotations

import pytest

from app.eval.chart import HEIGHT, WIDTH, SetBars, draw_chart
from app.eval.paper_numbers import paper_numbers


def test_the_chart_draws_ref_resp_given_and_the_papers_marks(tmp_path, qapp):
    # qapp: the suite's one QApplication. The chart would make a bare QGuiApplication, and
    # Qt aborts the process when a widget test then needs a QApplication.
    from PySide6.QtGui import QImage

    bars = [
        SetBars("llama_questions", {"inject": 0.30, "no-inject": 0.10},
                ref={"inject": 0.60, "no-inject": None}, given={"inject": 0.40},
                paper=paper_numbers("llama_questions")),
        SetBars("my_own_set", {"inject": 0.50}, ref={"inject": 0.55}, given={"inject": 0.45}),
    ]
    path = tmp_path / "results.png"
    drawing = draw_chart(path, bars, {"ret_lat_s": [0.4, 0.6], "inj_lat_s": [0.3]}, "QA")
    image = QImage(str(path))
    assert (image.width(), image.height()) == (WIDTH, HEIGHT)

    labels = [label for label, _ in drawing.legend]
    for label in ("inject", "no-inject", "ref (judge on the spans)",
                  "resp (judge on the words)", "P(resp|ref)", "paper Gemma 4 ref",
                  "paper Gemma 4 resp", "paper GPT-4.1 ref", "paper GPT-4.1 resp"):
        assert label in labels, label

    drawn = {(m.set_name, m.series, m.metric): m for m in drawing.marks}
    assert set(drawn) == {
        ("llama_questions", "inject", "ref"), ("llama_questions", "inject", "resp"),
        ("llama_questions", "inject", "P(resp|ref)"), ("llama_questions", "no-inject", "resp"),
        ("llama_questions", "paper Gemma 4", "ref"), ("llama_questions", "paper Gemma 4", "resp"),
        ("llama_questions", "paper GPT-4.1", "ref"), ("llama_questions", "paper GPT-4.1", "resp"),
        ("my_own_set", "inject", "ref"), ("my_own_set", "inject", "resp"),
        ("my_own_set", "inject", "P(resp|ref)")}  # no paper numbers: no marks there
    assert drawn[("llama_questions", "paper GPT-4.1", "resp")].value == pytest.approx(0.833)
    for mark in drawing.marks:  # each is painted where it says, in its legend's colour
        assert image.pixelColor(mark.x, mark.y).name() == mark.colour, mark
        assert mark.colour in dict(drawing.legend).values() or mark.series == "no-inject"
    # Three different shades for one arm's three numbers, and the marks sit where their
    # values are: the paper's 83.3 % resp above our 30 % resp.
    assert len({drawn[("llama_questions", "inject", m)].colour
                for m in ("ref", "resp", "P(resp|ref)")}) == 3
    paper_resp = drawn[("llama_questions", "paper GPT-4.1", "resp")]
    paper_ref = drawn[("llama_questions", "paper GPT-4.1", "ref")]
    assert paper_ref.y < paper_resp.y < drawn[("llama_questions", "inject", "resp")].y
