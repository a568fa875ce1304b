"""Live progress: one line per phase in a terminal (rewritten in place on a TTY, written once into a log), with
the step, elapsed time, ETA and the key metrics."""

import io

from agentrl.core.progress import Progress, format_seconds


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_a_log_file_gets_one_line_per_phase_with_its_key_metrics():
    out = io.StringIO()
    p = Progress("SFT demo", 4, shown=("loss", "eval_loss"), front="terminal", stream=out)
    for step in range(1, 5):
        p.update(step, {"loss": 3.0 / step, "grad_norm": 1.0})
    p.close()
    p.close()  # closing twice writes nothing more
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and "{" not in lines[0]
    assert lines[0].startswith("SFT demo: step 4/4 · 0:00 elapsed") and lines[0].endswith("loss 0.75")
    assert "grad_norm" not in lines[0] and "ETA" not in lines[0]  # only the shown metrics; no ETA when done


def test_a_terminal_line_is_rewritten_in_place_and_ends_with_one_newline():
    out = Tty()
    p = Progress("GRPO demo", 10, shown=("reward",), front="terminal", stream=out, redraw_seconds=0)
    for step in range(1, 4):
        p.update(step, {"reward": 0.5})
    p.close()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.count("\r") >= 3
    assert "GRPO demo: step 3/10" in text and "ETA" in text and "reward 0.5" in text


def test_points_and_steps_make_the_chart():
    p = Progress("x", 10, chart=("reward",), front="terminal", stream=io.StringIO())
    assert p.chart() is None
    p.update(1, {"reward": 0.25, "loss": 1.0})
    p.point(1, {"heldout/f1": 0.5})
    assert sorted(r["series"] for r in p.points) == ["heldout/f1", "reward"]
    assert p.chart() is not None


def test_seconds_read_as_minutes_or_hours():
    assert format_seconds(5) == "0:05" and format_seconds(125) == "2:05" and format_seconds(3725) == "1:02:05"
