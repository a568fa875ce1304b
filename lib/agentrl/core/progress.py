"""Live progress of a long phase (training, evaluation) in whichever front end runs it.

- marimo (``marimo edit`` / ``marimo run``): a progress bar (steps, elapsed, ETA) and a chart of the phase's
  headline metric, redrawn in the running cell's output while the phase runs;
- Jupyter / Colab: a ``tqdm.auto`` bar (an ipywidget) with the key metrics, and the chart updated in place;
- a terminal: one line per phase, rewritten in place on a TTY, written once at the end otherwise (a log file).

Nothing here imports a front end at module level; :func:`frontend` decides once per :class:`Progress`.
"""

from __future__ import annotations

import logging
import sys
import time


def frontend() -> str:
    """Return "marimo" inside a running marimo cell (edit or run mode), "notebook" inside a Jupyter/IPython kernel,
    else "terminal"."""
    try:
        import marimo as mo

        if mo.running_in_notebook() and mo.app_meta().mode in ("edit", "run"):
            return "marimo"
    except Exception:  # marimo absent or no marimo context
        pass
    shell = sys.modules.get("IPython")
    try:
        if shell is not None and shell.get_ipython() is not None and "IPKernelApp" in shell.get_ipython().config:
            return "notebook"
    except Exception:
        pass
    return "terminal"


def format_value(value) -> str:
    """Return ``value`` short for a progress line: floats with 4 significant digits, others as str."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_seconds(seconds: float) -> str:
    """Return ``seconds`` as ``m:ss`` (or ``h:mm:ss``)."""
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """A phase's progress: ``update(step, metrics)`` as it goes, ``close()`` at the end.

    ``shown`` names the metrics on the line (the first present ones, in order); ``chart`` the metrics drawn over
    the steps in marimo and Jupyter (held-out evaluations included when passed to :meth:`point`).
    """

    def __init__(self, title: str, total: int, *, shown: tuple[str, ...] = (), chart: tuple[str, ...] = (),
                 front: str | None = None, stream=None, redraw_seconds: float = 1.0):
        self.title, self.total = title, max(1, int(total))
        self.shown, self.chart_keys = shown, chart
        self.front = front or frontend()
        self.stream = stream or sys.stdout
        self.step, self.metrics, self.points = 0, {}, []
        self.start = time.monotonic()
        self._drawn = 0.0
        self._redraw = redraw_seconds
        self._bar = self._handle = None
        self.closed = False
        if self.front == "marimo":
            import marimo as mo

            # not appended by marimo itself: it is drawn with the chart below it by _draw_marimo
            self._bar = mo.status.progress_bar(total=self.total, title=title, show_eta=True, show_rate=True,
                                               disabled=True).progress
        elif self.front == "notebook":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=title, dynamic_ncols=True)

    def line(self) -> str:
        """Return the terminal line: title, step/total, elapsed, ETA and the key metrics."""
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.step * (self.total - self.step) if self.step else None
        parts = [f"{self.title}: step {self.step}/{self.total}", f"{format_seconds(elapsed)} elapsed"]
        if eta is not None and self.step < self.total:
            parts.append(f"ETA {format_seconds(eta)}")
        return " · ".join([*parts, self.metrics_text()] if self.metrics_text() else parts)

    def metrics_text(self) -> str:
        """Return the key metrics as ``name value · name value``."""
        return " · ".join(f"{k} {format_value(self.metrics[k])}" for k in self.shown if k in self.metrics)

    def point(self, step: int, metrics: dict) -> None:
        """Add chart points (e.g. a held-out evaluation) without moving the bar."""
        self.points += [{"step": step, "series": k, "value": float(v)} for k, v in metrics.items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)]
        self.metrics.update(metrics)
        self._draw(force=True)

    def update(self, step: int, metrics: dict | None = None) -> None:
        """Move to ``step`` with the latest ``metrics`` (those in ``chart`` become chart points)."""
        metrics = metrics or {}
        advance, self.step = max(0, step - self.step), max(self.step, step)
        self.metrics.update(metrics)
        self.points += [{"step": step, "series": k, "value": float(metrics[k])} for k in self.chart_keys
                        if isinstance(metrics.get(k), (int, float))]
        if self.front == "marimo":
            elapsed = f"{format_seconds(time.monotonic() - self.start)} elapsed"
            self._bar.update_progress(increment=advance, subtitle=" · ".join(filter(None, [elapsed,
                                                                                           self.metrics_text()])))
        elif self.front == "notebook":
            self._bar.update(advance)
            self._bar.set_postfix_str(self.metrics_text())
        self._draw(force=self.step >= self.total)

    def close(self) -> None:
        """End the phase: the final bar and chart, or the terminal's last line."""
        if self.closed:
            return
        self.closed = True
        if self.front == "terminal":
            end = "\r" if self.stream.isatty() else ""
            print(f"{end}{self.line()}", file=self.stream, flush=True)
            return
        self._draw(force=True)
        if self.front == "notebook":
            self._bar.close()

    def chart(self):
        """Return an altair line chart of the points so far (None without any)."""
        if not self.points:
            return None
        import altair as alt
        import polars as pl

        return (alt.Chart(pl.DataFrame(self.points)).mark_line(point=True)
                .encode(x=alt.X("step:Q", scale=alt.Scale(domain=[0, self.total])), y=alt.Y("value:Q"),
                        color="series:N", tooltip=["step", "series", "value"])
                .properties(title=self.title, width=480, height=220))

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._drawn < self._redraw:
            return
        self._drawn = now
        if self.front == "terminal":
            if self.stream.isatty():
                print(f"\r{self.line()}\033[K", end="", file=self.stream, flush=True)
            return
        chart = self.chart()
        if self.front == "marimo":
            import marimo as mo

            mo.output.replace(mo.vstack([self._bar, chart] if chart is not None else [self._bar]))
        elif chart is not None:
            from IPython.display import display

            if self._handle is None:
                self._handle = display(chart, display_id=True)
            else:
                self._handle.update(chart)


def quiet_library_output() -> None:
    """Turn off the libraries' own per-item output around a phase: datasets' map bars, transformers' and the
    Hub's download/loading bars and info logs, math_verify's per-call timeout warning. Each phase reports through
    :class:`Progress` instead."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    try:
        import datasets

        datasets.disable_progress_bars()
    except ImportError:
        pass
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
