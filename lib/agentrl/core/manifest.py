"""Run manifests: every phase writes ``runs/<phase>/<name>/manifest.json`` with config, versions, counts, inputs.

Secrets never reach a manifest: any config key that looks like a credential is replaced by ``"***"``
before writing, and values equal to a known secret (the API key in use) are scrubbed wherever they occur.
"""

from __future__ import annotations

import datetime as _dt
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from agentrl.core.io import DataError, read_json, write_json

# Words that make a key a credential wherever they appear (``client_secret``, ``openai_api_key``, ``apikey``).
_SECRET_WORDS = re.compile(r"api_?key|secret|passw(?:or)?d|authorization|bearer|credential")
# "token" only as the whole key or its last word (``hf_token``, ``access_token``, ``authToken``): ``max_tokens``,
# ``prompt_tokens`` and ``tokenizer`` are settings and counts, and ``pad_token``/``eos_token`` name vocabulary.
_NOT_CREDENTIAL_TOKENS = {"pad", "eos", "bos", "unk", "sep", "cls", "mask", "special", "max", "min", "num", "start",
                          "end", "stop", "image", "vision", "audio", "video"}
_PACKAGES = (
    "agentrl", "torch", "transformers", "trl", "peft", "datasets", "accelerate", "unsloth", "vllm",
    "sentence-transformers", "faiss-cpu", "bm25s", "openai", "mcp", "polars", "marimo",
)  # fmt: skip


def package_versions(names: tuple[str, ...] = _PACKAGES) -> dict[str, str]:
    """Return ``{package: version}`` for the installed packages among ``names`` (missing ones are left out)."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit(cwd: str | Path | None = None) -> str | None:
    """Return the current git commit (with ``-dirty`` when the tree has changes), or None outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=cwd, capture_output=True, text=True, timeout=5)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def is_secret_key(key: object) -> bool:
    """Return True when a config key names a credential (its value is masked in manifests)."""
    # split camelCase and separators into lower-case words: "hfToken" -> ["hf", "token"], "max-tokens" -> [...]
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(key)).lower()
    words = [w for w in re.split(r"[^a-z0-9]+", words) if w]
    if not words:
        return False
    if _SECRET_WORDS.search("_".join(words)):
        return True
    return words[-1] == "token" and (len(words) == 1 or words[-2] not in _NOT_CREDENTIAL_TOKENS)


_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+", re.IGNORECASE)


def public_url(url: str) -> str:
    """Return ``url`` without the secrets a URL can carry: a password (``user:***@``) and query values
    (``?key=***``); the rest as given."""
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    if "@" in host:
        user, _, where = host.rpartition("@")
        host = f"{user.partition(':')[0]}{':***' if ':' in user else ''}@{where}"
    if "?" not in host:
        path = re.sub(r"([?&][^=&#]*)=[^&#]*", r"\1=***", path)
    else:  # no path: the query follows the host
        host = re.sub(r"([?&][^=&#]*)=[^&#]*", r"\1=***", host)
    return f"{scheme}://{host}{slash}{path}"


def scrub(obj: Any, secrets: tuple[str, ...] = ()) -> Any:
    """Return a deep copy of ``obj`` with credential-like keys masked, known secret values removed and every URL's
    password and query values masked (:func:`public_url`)."""
    secrets = tuple(s for s in secrets if s and len(s) >= 4)
    if isinstance(obj, dict):
        return {k: ("***" if is_secret_key(k) and v not in (None, "") else scrub(v, secrets))
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub(v, secrets) for v in obj]
    if isinstance(obj, str):
        for s in secrets:
            obj = obj.replace(s, "***")
        return _URL.sub(lambda m: public_url(m.group(0)), obj) if "://" in obj else obj
    return obj


def write_manifest(run_dir: str | Path, *, phase: str, config: dict, counts: dict | None = None,
                   inputs: dict | None = None, extra: dict | None = None, secrets: tuple[str, ...] = (),
                   name: str | None = None) -> Path:
    """Write ``run_dir/manifest.json`` (phase, config without secrets, versions, counts, inputs); return its path.

    ``name`` defaults to the directory name (pass the final name when writing into a staging directory).
    """
    run_dir = Path(run_dir)
    doc = {
        "phase": phase,
        "name": name or run_dir.name,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": scrub(" ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv)), secrets),
        "git_commit": git_commit(Path(__file__).parent),
        "versions": package_versions(),
        "config": scrub(config, secrets),
        "counts": counts or {},
        "inputs": {k: str(v) for k, v in (inputs or {}).items()},
    }
    if extra:
        doc.update(scrub(extra, secrets))
    return write_json(run_dir / "manifest.json", doc)


def recorded_sources(paths) -> list[tuple[str, Path]]:
    """Return ``(env source, manifest)`` for each user's environment the manifests at or beside ``paths`` name."""
    out: dict[str, Path] = {}
    for p in paths:
        p = Path(p)
        for manifest in (p / "manifest.json", p.parent / "manifest.json", p.parent.parent / "manifest.json"):
            if not manifest.is_file():
                continue
            try:
                data = read_json(manifest)
            except DataError:
                continue
            sources = [(data.get("config") or {}).get("env_source"), *((data.get("extra") or {}).get("env_sources")
                                                                       or [])]
            for s in sources:
                if isinstance(s, str) and s:
                    out.setdefault(s, manifest)
            break
    return list(out.items())
