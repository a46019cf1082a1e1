"""What the capstone my_writer is compared with: the greedy tokens mm.LLM(...).generate writes
on the course's model bard, for prompts whose greedy path is clear, and bard's weights, config,
tokenizer and reference model.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

from minimodel.grading.i18n import tr

if TYPE_CHECKING:
    from minimodel.config import Qwen3Config
    from minimodel.reference.model import Qwen3ForCausalLM
    from minimodel.tokenizer import Tokenizer

WRITER_PROMPTS = [
    "ROMEO.\n", "Shall I compare thee to a summer's", "《静夜思》\n作者：李白\n",
    "HAMLET.\nTo be, or not to be", "《春晓》\n作者：",
]
WRITER_NEW = 12  # greedy tokens per prompt: enough to catch a wrong step, cheap without a cache


@functools.lru_cache(maxsize=1)
def _bard() -> tuple[dict[str, torch.Tensor], Qwen3Config, Tokenizer, Qwen3ForCausalLM]:
    """(float32 weights by Hugging Face name, config, tokenizer, reference model) of bard."""
    from safetensors.torch import load_file

    import minimodel as mm

    path = mm.resolve_model("bard")
    weights = {k: v.float() for k, v in load_file(str(path / "model.safetensors")).items()}
    model = mm.reference.Qwen3ForCausalLM.from_pretrained(path)  # float32
    return weights, mm.Qwen3Config.from_pretrained(path), mm.load_tokenizer(path), model


@functools.lru_cache(maxsize=1)
def _engine_greedy() -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """(prompt ids, greedy new ids) from mm.LLM for each prompt whose greedy path is clear.

    A step where the two best logits are within 1e-3 could go either way in another float32
    computation of the same model; such prompts are left out.
    """
    import minimodel as mm

    _, _, tok, model = _bard()
    prompts = [tok.encode(p) for p in WRITER_PROMPTS]
    llm = mm.LLM("bard", device="cpu", dtype=torch.float32, kv_cache_bytes=1 << 25)
    params = mm.SamplingParams(temperature=0.0, max_new_tokens=WRITER_NEW, ignore_eos=True)
    outs = llm.generate(prompts, params, use_tqdm=False)
    del llm
    clear = []
    with torch.inference_mode():
        for ids, out in zip(prompts, outs):
            new = list(out.token_ids)
            logits = model(torch.tensor([ids + new]))[0, len(ids) - 1 : -1]  # [n, V]
            top2 = logits.topk(2, dim=-1).values
            chosen = logits.gather(-1, torch.tensor(new)[:, None])[:, 0]
            if bool(((chosen == top2[:, 0]) & (top2[:, 0] - top2[:, 1] > 1e-3)).all()):
                clear.append((tuple(ids), tuple(new)))
    assert len(clear) >= 3, tr("too few prompts with a clear greedy path")
    return tuple(clear)


def _pick_prompts(n: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """n of the clear prompts of _engine_greedy, drawn at random: (prompt ids, greedy new ids)."""
    clear = _engine_greedy()
    return [clear[int(i)] for i in torch.randperm(len(clear))[:n]]
