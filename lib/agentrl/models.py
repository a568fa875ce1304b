"""Loading causal LMs and tokenizers for inference (training-time loading lives in agentrl.train.models)."""

from __future__ import annotations

from pathlib import Path

from agentrl.io import DataError


def load_tokenizer(path: str | Path):
    """Return the tokenizer saved at ``path`` (or a hub id), left-padded for batched generation."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_inference_model(model_path: str | Path, adapter: str | Path | None = None, *, dtype: str = "auto",
                         device: str | None = None):
    """Return ``(model, tokenizer)`` in eval mode, with the LoRA ``adapter`` applied when given.

    A missing local model or adapter directory raises DataError naming it.
    """
    import torch
    from transformers import AutoModelForCausalLM

    if _looks_local(model_path) and not Path(model_path).is_dir():
        raise DataError(f"{model_path}: model directory not found")
    if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
        raise DataError(f"{adapter}: adapter not found (expected adapter_config.json in it)")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = torch.float32 if device == "cpu" and dtype == "auto" else dtype
    tokenizer = load_tokenizer(adapter if adapter and (Path(adapter) / "tokenizer_config.json").exists()
                               else model_path)
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch_dtype).to(device)
    if adapter is not None:
        from peft import PeftModel

        # merged into the weights: the same outputs without the adapter's extra matmuls (an unmerged rank-16 LoRA
        # on every linear layer made a 20 x 1300-token prefill of SmolLM2 28% slower on CPU: docs/decisions.md)
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    model.eval()
    return model, tokenizer


def _looks_local(path) -> bool:
    s = str(path)
    return s.startswith((".", "/", "~")) or Path(s).exists() or s.count("/") != 1
