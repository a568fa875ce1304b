"""The five notebooks in a real browser, as a new user opens them: ``marimo edit --headless`` serves each one, Debian's
chromium (driven by selenium) opens it, the cells that run on open run (the repository's ``[tool.marimo.runtime]
auto_instantiate``), the cheap buttons are pressed (retrieval evaluation of the reused index, the oracle's evaluation,
curation), notebook 01 is switched to an endpoint without a URL, and no cell may show an error. Screenshots go to
``runs/screenshots/``. Skipped, with the reason, where chromium, chromedriver or selenium is missing."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, free_port, small_preset

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SHOTS = ROOT / "runs" / "screenshots"

pytestmark = pytest.mark.skipif(
    not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)),
    reason="no chromium + chromedriver (Debian: apt-get install chromium chromium-driver; .ci/run installs them)")

# every element of the page, through marimo's shadow roots (its widgets render inside them)
_ALL = """
const out = [];
const walk = (root) => root.querySelectorAll('*').forEach(e => { out.push(e); if (e.shadowRoot) walk(e.shadowRoot); });
walk(document);
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A working directory with the demo preset shrunk (configs/demo.toml) and its corpus + index built (what
    notebook 00 reuses on open)."""
    from agentrl.app.presets import load
    from agentrl.data.pipeline import corpus_and_index

    work = tmp_path_factory.mktemp("browser")
    (work / "configs").mkdir()
    (work / "data").symlink_to(ROOT / "data")
    (work / "configs" / "demo.toml").write_text(small_preset((ROOT / "configs" / "demo.toml").read_text()))
    cwd = Path.cwd()
    os.chdir(work)
    try:
        preset = load(str(work / "configs" / "demo.toml"))
        corpus_and_index(preset.settings("corpus"), preset.settings("index"), progress=False)
    finally:
        os.chdir(cwd)
    return work


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (uv sync --group dev)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2400"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield driver
    driver.quit()


class Notebook:
    """One notebook served by ``marimo edit --headless`` and open in the browser."""

    def __init__(self, browser, workspace: Path, name: str):
        self.driver, self.name = browser, name
        port = free_port()
        env = {**os.environ, "AGENTRL_WORKDIR": str(workspace), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        self.log = workspace / f"marimo_{name}.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "marimo", "edit", "--headless", "--no-token", "-p",
                                      str(port), str(ROOT / "notebooks" / f"{name}.py")],
                                     cwd=workspace, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                browser.get(f"http://127.0.0.1:{port}/")
                break
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError(f"marimo did not start: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.5)

    def js(self, body: str, *args):
        return self.driver.execute_script(_ALL + body, *args)

    def idle(self, timeout: float = 180) -> None:
        """Wait until the cells have run: every cell has a status, none is queued or running, twice in a row."""
        deadline, calm = time.monotonic() + timeout, 0
        while calm < 2:
            assert time.monotonic() < deadline, f"{self.name}: cells still running after {timeout} s"
            time.sleep(1.0)
            busy = self.js("return out.filter(e => ['running', 'queued'].includes(e.dataset?.status)).length;")
            cells = self.js("return out.filter(e => e.classList?.contains('marimo-cell')).length;")
            outputs = self.js("return out.filter(e => e.dataset?.cellRole === 'output').length;")
            calm = calm + 1 if cells and outputs and not busy else 0

    def text(self) -> str:
        return self.js("return document.body.innerText;")

    def errors(self) -> list[str]:
        """Return the text of every cell that shows an error (marimo marks it ``has-error``)."""
        return self.js("return out.filter(e => e.classList?.contains('has-error'))"
                       ".map(e => e.innerText.slice(0, 600));")

    def click(self, label: str) -> None:
        found = self.js("const b = out.filter(e => e.tagName === 'BUTTON' && e.innerText.trim() === arguments[0]);"
                        "if (b.length) b[0].click(); return b.length;", label)
        assert found, f"{self.name}: no button {label!r}"

    def choose(self, option: str) -> None:
        """Pick ``option`` in the dropdown that offers it."""
        found = self.js("const s = out.filter(e => e.tagName === 'SELECT' && [...e.options].some(o => o.value === "
                        "arguments[0] || o.text === arguments[0]));"
                        "if (!s.length) return 0; const o = [...s[0].options].find(o => o.value === arguments[0] || "
                        "o.text === arguments[0]); s[0].value = o.value;"
                        "s[0].dispatchEvent(new Event('change', {bubbles: true})); return 1;", option)
        assert found, f"{self.name}: no dropdown offering {option!r}"

    def count(self, what: str) -> int:
        """Return how many tables ("table") or charts ("chart": vega-embed canvases/SVGs) the page shows."""
        test = {"table": "e.tagName === 'TABLE'", "chart": "e.classList?.contains('vega-embed')"}[what]
        return self.js(f"return out.filter(e => {test}).length;")

    def screenshot(self) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        # marimo scrolls inside its app element, not the body: size the window to the tallest scrolling content
        height = self.driver.execute_script(
            "return Math.max(...[...document.querySelectorAll('*')].map(e => e.scrollHeight));")
        self.driver.set_window_size(1400, max(1200, min(int(height) + 200, 8000)))
        path = SHOTS / f"{self.name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _open(browser, workspace, name):
    nb = Notebook(browser, workspace, name)
    try:
        nb.idle()
    except BaseException:
        nb.close()
        raise
    return nb


@pytest.mark.slow
def test_every_notebook_opens_runs_its_cheap_cells_and_shows_no_error_in_a_real_browser(browser, workspace):
    nb = _open(browser, workspace, "00_corpus")
    try:
        assert "reused" in nb.text() and not nb.errors(), nb.errors()  # the index was built: reused on open
        assert "Press Evaluate retrieval" in nb.text()  # the 30 s evaluation waits for its button
        nb.click("Evaluate retrieval")
        nb.idle()
        assert not nb.errors(), nb.errors()
        assert nb.count("table") >= 2 and nb.count("chart") >= 1  # recall table, search hits; the recall chart
        nb.screenshot()
    finally:
        nb.close()

    nb = _open(browser, workspace, "01_agent_eval")
    try:
        assert not nb.errors(), nb.errors()
        nb.click("Run evaluation")  # the oracle (the demo's policy) on the training questions
        nb.idle()
        assert not nb.errors(), nb.errors()
        assert "30 trajectories" in nb.text() and nb.count("chart") >= 1 and nb.count("table") >= 1
        assert "<answer>" in nb.text()  # the trajectory viewer keeps the system prompt's tags
        nb.screenshot()
        nb.choose("endpoint")  # an endpoint without a base URL: a note, not an error
        nb.idle()
        assert not nb.errors(), nb.errors()
        assert "No base URL" in nb.text() and "vllm serve None" not in nb.text()
    finally:
        nb.close()

    nb = _open(browser, workspace, "02_trajectories")
    try:
        assert not nb.errors(), nb.errors()
        assert nb.count("chart") >= 3  # tool calls, F1, tokens by outcome
        nb.click("Curate + export")
        nb.idle()
        assert not nb.errors(), nb.errors()
        assert "Wrote runs/data/sft_demo" in nb.text()
        assert "PosixPath" not in nb.text()
        nb.screenshot()
    finally:
        nb.close()
    assert (workspace / "runs" / "data" / "sft_demo" / "trl" / "train.jsonl").is_file()

    for name, waiting in (("03_sft", "Press Load model + data"), ("04_grpo", "Build the missing inputs")):
        nb = _open(browser, workspace, name)
        try:  # nothing loads a model or trains on open: each waits for its button
            assert not nb.errors(), nb.errors()
            assert waiting in nb.text()
            nb.screenshot()
        finally:
            nb.close()
    assert not (workspace / "runs" / "sft").exists() and not (workspace / "runs" / "grpo").exists()
