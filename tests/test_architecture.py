"""The package's shape: imports point one way (application -> training -> rollout -> environments -> retrieval/data
-> core), no import cycle, few top-level modules, and no environment named outside its folder and the registry."""

import ast
import subprocess
import sys
from collections import defaultdict

from conftest import ROOT

LIB = ROOT / "lib" / "agentrl"
LAYERS = {"core": 0, "data": 1, "retrieval": 1, "envs": 2, "rollout": 3, "train": 4, "app": 5, "cli": 5, "colab": 5}


def modules() -> dict[str, object]:
    out = {}
    for path in LIB.rglob("*.py"):
        name = ".".join(path.relative_to(LIB.parent).with_suffix("").parts).removesuffix(".__init__")
        out[name] = path
    return out


def imports() -> dict[str, set[str]]:
    """Every agentrl module each module imports, function-level imports included."""
    mods = modules()
    graph = defaultdict(set)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentrl"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    graph[name].add(full if full in mods else node.module)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name.startswith("agentrl")}
    return graph


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1]] if len(parts) > 1 else 0


def test_every_import_points_down_the_layers():
    upward = sorted((m, t) for m, targets in imports().items() for t in targets if layer(t) > layer(m))
    assert upward == []


def test_there_is_no_import_cycle():
    graph, mods = imports(), set(modules())
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in mods:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    assert cycles == []


def test_agentrls_own_modules_and_the_stdlib_are_imported_at_module_top():
    """Heavy third-party imports (torch, transformers, trl, ...) stay inside the functions that need them; the
    project's own modules and the standard library are imported at the top, where a reader sees the dependencies."""
    inside = []
    for path in LIB.rglob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                         [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                top = {n.split(".")[0] for n in names}
                if top & ({"agentrl"} | set(sys.stdlib_module_names)):
                    inside.append(f"{path.relative_to(LIB)}:{node.lineno}")
    assert inside == []


def test_the_command_line_answers_help_without_importing_the_library():
    """``agentrl --help`` and a mistyped flag need the parser only: agentrl.cli loads the application (every library
    module, numpy among them) once a command is known (benchmarks/cli_import.py measures the import)."""
    code = "import sys, agentrl.cli; print(sorted(m for m in sys.modules if m.startswith('agentrl') or m == 'numpy'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == ["agentrl", "agentrl.app", "agentrl.app.flags", "agentrl.cli", "agentrl.core",
                         "agentrl.core.io", "agentrl.envs"]


def test_the_package_has_fewer_than_a_dozen_top_level_modules():
    top = [p for p in LIB.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()]
    assert len(top) < 12, sorted(p.name for p in top)
    assert sorted(p.name for p in top if p.is_dir()) == ["app", "core", "data", "envs", "retrieval", "rollout",
                                                          "train"]


def test_no_environment_is_named_outside_its_folder_and_the_registry():
    from agentrl.envs import registry

    # `agentrl search` (the CLI command) and the MCP retrieval server's tool are called search: retrieval, not the env;
    # a notebook cell's type is "code"; the manifest records the version of the mcp package
    allowed = {("cli.py", "search"), ("retrieval/mcp_fast.py", "search"), ("colab.py", "code"),
               ("core/manifest.py", "mcp")}
    found = []
    for path in LIB.rglob("*.py"):
        where = path.relative_to(LIB).as_posix()
        if where.startswith("envs/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in registry.BUILTIN and (where, node.value) not in allowed:
                found.append((where, node.lineno, node.value))
    assert found == []


def test_each_environment_folder_has_a_readme_naming_its_splits_tools_rewards_and_metrics():
    from agentrl.envs import registry

    for name in registry.BUILTIN:
        spec = registry.get(name)
        readme = (LIB / "envs" / name / "README.md").read_text()
        assert spec.folder == f"agentrl.envs.{name}"
        for part in ("splits", "tools", "rewards", "metrics", "prompts"):
            assert f"| {part} |" in readme, (name, part)
        for tool in registry.tools(spec):
            assert f"`{tool}" in readme, (name, tool)
        for reward in spec.rewards:
            assert f"`{reward}`" in readme, (name, reward)


def test_the_colab_setup_imports_with_the_standard_library_alone():
    """The setup cell imports agentrl.colab from a clone or the bundle wheel before anything is installed."""
    code = (f"import sys; sys.path.insert(0, {str(LIB.parent)!r}); import agentrl.colab; "
            "print(sorted(m for m in sys.modules if m.startswith('agentrl')))")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True)  # -S: no site-packages
    assert proc.returncode == 0, proc.stderr[-2000:]
