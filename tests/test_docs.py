"""The docs as a newcomer reads them: every `agentrl` command in a fenced block of README.md, docs/*.md and the
environments' READMEs parses with the CLI's own parser and passes the preset check it would meet when run (its
preset, keys, flags, ranges, input files), unless the docs mark it a fragment (`# fragment`, or `...` standing for
what the reader fills in). The README's CPU path runs in order on the demo preset (tests/test_demo.py runs `agentrl
demo`; here the README's own commands, each writing what the next reads)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.app.commands import preset_of
from agentrl.cli import build_parser
from agentrl.core.io import DataError

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "lib" / "agentrl" / "envs").glob(
    "*/README.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def commands(path: Path) -> list[tuple[int, str, list[str]]]:
    """Return ``(line, text, argv)`` of every `agentrl` command in the shell blocks of ``path`` (continuation lines
    joined; fragments left out)."""
    text = path.read_text()
    out = []
    for block in FENCE.finditer(text):
        if block.group(1) not in ("bash", "sh", "shell", "console", ""):
            continue
        start = text[:block.start(2)].count("\n") + 1
        lines = block.group(2).splitlines()
        i = 0
        while i < len(lines):
            first, line = i, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            if "# fragment" in line:
                continue
            for tokens in _commands_of(line):
                argv = _agentrl_argv(tokens)
                if argv is not None and not any("..." in t for t in argv):
                    out.append((start + first, line.strip(), argv))
    return out


def _commands_of(line: str) -> list[list[str]]:
    """Return the commands of a shell line: its tokens split at ``&&``, ``||``, ``;``, ``|`` and ``&``, comments
    dropped; none when the line does not parse as shell words."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return []
    out, current = [], []
    for token in tokens:
        if token.startswith("#"):
            break
        if token in ("&&", "||", ";", "|", "&"):
            out.append(current)
            current = []
        else:
            current.append(token)
    return [c for c in [*out, current] if c]


def _agentrl_argv(tokens: list[str]) -> list[str] | None:
    for prefix in (["uv", "run", "agentrl"], ["agentrl"], ["uv", "run", "python", "-m", "agentrl.cli"],
                   ["python", "-m", "agentrl.cli"]):
        if tokens[:len(prefix)] == prefix:
            return tokens[len(prefix):]
    if "agentrl.cli" in tokens:  # accelerate launch ... -m agentrl.cli sft ...
        return tokens[tokens.index("agentrl.cli") + 1:]
    return None


ALL = [(path, line, text, argv) for path in DOCS for line, text, argv in commands(path)]


def test_the_docs_hold_many_commands_and_the_readme_its_quickstart():
    assert len(ALL) > 80
    assert sum(1 for path, *_ in ALL if path.name == "README.md" and path.parent == ROOT) >= 8


@pytest.mark.parametrize(("path", "line", "text", "argv"), ALL,
                         ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _, _ in ALL])
def test_every_documented_command_parses_and_passes_its_preset_check(path, line, text, argv, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    where = f"{path.relative_to(ROOT)}:{line}: {text}"
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"{where}: the CLI's parser refuses it: {capsys.readouterr().err.strip()[-400:]}")
    if args.command in ("demo", "tiny-model", "models", "compare", "analyze", "search", "retrieval-eval", "serve",
                        "multihop-rag", "import-seed"):
        return  # no preset (or only the demo's): their files are written by earlier documented steps
    if getattr(args, "gpu", None) == "auto":
        args.gpu = "none"  # the detected card is the reader's; "none" checks the preset's base tables
    try:
        preset_of(args)
    except DataError as exc:
        pytest.fail(f"{where}: {exc}")


def test_a_fragment_is_marked_as_one():
    text = "```bash\nagentrl eval --config X   # fragment\nagentrl grpo ... --set a=1\nagentrl sft --config demo\n```\n"
    doc = ROOT / "build" / "fragment_doc.md"
    doc.parent.mkdir(exist_ok=True)
    doc.write_text(text)
    assert [argv for _, _, argv in commands(doc)] == [["sft", "--config", "demo"]]


def run_section(doc: Path, heading: str, work: Path) -> list[list[str]]:
    """Run the commands of the section ``heading`` of ``doc`` in order, as written, in the fresh working directory
    ``work`` (nothing placed there first: each command writes what the next reads); return them."""
    section = doc.read_text().split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    part = work / "section.md"
    part.write_text(section)
    steps = [argv for _, _, argv in commands(part)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for argv in steps:
        proc = subprocess.run([sys.executable, "-m", "agentrl.cli", *argv], cwd=work, env=env,
                              capture_output=True, text=True, timeout=1200)
        assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-2000:])
    return steps


@pytest.mark.slow
def test_the_readme_cpu_path_runs_in_order_on_the_demo_preset(tmp_path):
    """The README's CPU quickstart, command by command as written, in a fresh working directory (nothing placed
    there first: `sft` builds the tiny model on first use)."""
    steps = run_section(ROOT / "README.md", "Quickstart on CPU", tmp_path)
    assert [s[0] for s in steps] == ["corpus", "index", "eval", "curate", "export", "sft", "grpo"]
    assert (tmp_path / "runs" / "grpo" / "grpo_demo" / "adapter").is_dir()


@pytest.mark.slow
def test_the_mcp_walkthrough_runs_every_step_on_the_example_server(tmp_path):
    """docs/environments.md's MCP walkthrough (configs/mcp_example.toml: the example notes server and its tasks) as
    written: eval -> curate -> export -> sft -> grpo -> the held-out evaluation, no step missing."""
    steps = run_section(ROOT / "docs" / "environments.md", "Train on your MCP server", tmp_path)
    assert [s[0] for s in steps] == ["eval", "curate", "export", "sft", "grpo", "eval"]
    held = (tmp_path / "runs" / "eval" / "mcp_grpo_heldout" / "trajectories.jsonl").read_text().splitlines()
    assert len(held) == 3  # the task file's last fifth
