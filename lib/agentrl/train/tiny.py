"""A tiny offline causal LM for tests and the CPU demo: BPE tokenizer + small random Qwen3, built in seconds.

The tokenizer is trained with ``tokenizers`` on the bundled data and on the text of the chat format, with
Qwen's special tokens; the chat template is the exact text of TRL's bundled ``qwen3_instruct_2507.jinja``
(what Qwen3-4B-Instruct-2507 ships), so TRL recognises it for tool-call parsing and swaps in its
``{% generation %}`` training variant for assistant-only loss. Nothing is downloaded.

    agentrl tiny-model --out runs/models/tiny
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from agentrl.core.config import data_file
from agentrl.core.io import iter_jsonl, staged_dir
from agentrl.data.corpus import context_paragraphs
from agentrl.envs import registry

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
TEMPLATE = "qwen3_instruct_2507.jinja"


@dataclass
class TinyConfig:
    """Size of the tiny model (about 0.8M parameters by default)."""

    vocab_size: int = 4000
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096
    # With the default 0.02 and tied embeddings, logits have a std of ~0.2: the softmax stays uniform whatever
    # LoRA learns, so greedy decoding works but sampling (GRPO at temperature 1) draws noise. 0.25 gives the
    # model room to become confident.
    embedding_std: float = 0.25
    seed: int = 0


def trl_template(name: str = TEMPLATE) -> str:
    """Return the exact text of one of TRL's bundled chat templates."""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / name).read_text(encoding="utf-8")


def training_texts(data_dir: str | Path = "data/samples") -> list[str]:
    """Return the texts the tokenizer learns from: bundled QA/SQL data, prompts and chat-format boilerplate."""
    data_dir = data_file(data_dir)
    texts: list[str] = registry.all_prompts()
    search = registry.tools(registry.get(registry.DEFAULT))[0]  # the chat boilerplate shows a call of this tool
    hotpot = data_dir / "hotpotqa_dev_200.jsonl"
    if hotpot.exists():
        for _, row in iter_jsonl(hotpot):
            texts.append(row["question"])
            texts += [str(a) for a in row.get("golden_answers", [])]
            texts += [f"Doc 1 (Title: {t}) {x}" for t, x in context_paragraphs(row)]
    db = data_dir / "dbbench_dev.jsonl"
    if db.exists():
        for _, row in iter_jsonl(db):
            texts.append(str(row.get("description", "")))
            texts.append(json.dumps(row.get("label", []), ensure_ascii=False))
    boiler = trl_template() + (
        '<tool_call>\n{"name": "' + search + '", "arguments": {"query": "Scott Derrickson"}}\n</tool_call>'
        '<tool_response>\nDoc 1 (Title: Ed Wood) Ed Wood was an American filmmaker.\n</tool_response>'
        '{"type": "function", "function": {"name": "' + search + '", "description": "Search the knowledge base", '
        '"parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "What"}}, '
        '"required": ["query"]}, "return": {"type": "string"}}}'
        "<answer>yes</answer><answer>Tim Burton</answer> execute_sql SELECT COUNT(*) FROM WHERE"
    )
    return texts + [boiler] * 50


def build_tiny_model(out_dir: str | Path, cfg: TinyConfig | None = None, data_dir: str | Path = "data/samples") -> Path:
    """Train the tokenizer, initialise the model and save both to ``out_dir`` (replaced atomically)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AddedToken, AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

    cfg = cfg or TinyConfig()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(training_texts(data_dir), trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=None, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", unk_token=None, padding_side="left",
                                  model_max_length=cfg.max_position_embeddings)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    tok.chat_template = trl_template()
    model_cfg = Qwen3Config(
        vocab_size=len(tok), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_position_embeddings, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tok.pad_token_id)
    torch.manual_seed(cfg.seed)
    model = AutoModelForCausalLM.from_config(model_cfg, dtype=torch.float32)
    torch.nn.init.normal_(model.get_input_embeddings().weight, std=cfg.embedding_std)
    model.generation_config.eos_token_id = model_cfg.eos_token_id
    model.generation_config.pad_token_id = model_cfg.pad_token_id
    with staged_dir(out_dir) as stage:
        model.save_pretrained(stage)
        tok.save_pretrained(stage)
        (stage / "tiny_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    return Path(out_dir)


def ensure_tiny_model(out_dir: str | Path = "runs/models/tiny", cfg: TinyConfig | None = None) -> Path:
    """Return ``out_dir``, building the tiny model there first if it is not already built."""
    out_dir = Path(out_dir)
    if not (out_dir / "config.json").exists():
        build_tiny_model(out_dir, cfg)
    return out_dir
