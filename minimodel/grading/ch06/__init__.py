"""Checks for chapter 06, the generation loop: generate, stream_text, visible_text, my_writer.

`generate` is graded with fake models: deterministic functions from a prefix to the next token,
dressed up as `forward_all(ids [1, T]) -> logits [1, T, V]`. `stream_text` is graded with the
real Qwen3 tokenizer on random Chinese, emoji and mixed text. `visible_text` is the stop-string
rule of a stream that never shows the start of a stop string. The capstone `my_writer` runs the
learner's own loop, model (chapter 04) and sampler (chapter 05) on the course's model `bard`
and compares its tokens with the engine's, `mm.LLM(...).generate`.

One job per module:
- generate, stream, visible: the checks of generate (with FakeModel), stream_text and
  visible_text;
- reference: what the capstone is compared with (bard, and mm.LLM's greedy tokens on it);
- writer: the checks of my_writer;
- common: a seeded random pick, and the check that token ids came back as a list of ints.

Importing this package registers every check.
"""

from minimodel.grading.ch06 import generate, stream, visible, writer

__all__ = ["generate", "stream", "visible", "writer"]
