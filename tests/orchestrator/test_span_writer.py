from app.orchestrator.span_writer import speakable_span


def test_markdown_goes_but_arithmetic_stays():
    text = "**Canberra** is the _capital_. See [the map](http://x). `6*7 = 42` and 2*3*4 = 24"
    assert speakable_span(text, 500) == (
        "Canberra is the _capital_. See the map. 6*7 = 42 and 2*3*4 = 24")


def test_bullets_headings_and_reasoning_traces_are_removed():
    text = "<think>secret plan</think>\n# Answer\n- one\n- two"
    assert speakable_span(text, 500) == "Answer one two"


def test_long_answers_are_cut_at_a_sentence_end():
    text = "First sentence here. " * 10
    cut = speakable_span(text, 100)
    assert len(cut) <= 100 and cut.endswith("here.")
