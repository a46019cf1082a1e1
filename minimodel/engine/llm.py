"""LLM: the user-facing engine. Requests in, RequestOutputs (or streamed text) out.

    llm = LLM("tiny")
    outs = llm.generate(["Hello", [1, 2, 3]], SamplingParams(max_tokens=16))

The engine loop is `step()`: schedule -> run -> postprocess -> collect finished.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator
from collections.abc import Sequence as SequenceABC
from typing import Any

import torch

from minimodel.engine import parallel
from minimodel.engine.config import EngineConfig, check_settings
from minimodel.engine.detokenizer import IncrementalDetokenizer, TextStream
from minimodel.engine.kv_cache import pages_needed
from minimodel.engine.outputs import RequestMetrics, RequestOutput
from minimodel.engine.radix_cache import RadixCache, RefCountedAllocator
from minimodel.engine.runner import ModelRunner, load_shard
from minimodel.engine.scheduler import ScheduledBatch, Scheduler
from minimodel.engine.sequence import Sequence
from minimodel.engine.spec_decode import SpeculativeDecoder
from minimodel.sampling import SamplingParams
from minimodel.tokenizer import Tokenizer, load_tokenizer

Prompt = str | list[int]

def _is_token(value: object) -> bool:
    """An integer that can be a token id: int, numpy.int64, a 0-d integer tensor; not a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _token_ids(prompt: object) -> list[int] | None:
    """A token-id prompt as a list of ints (numpy and torch integers too); None if it is not
    a sequence of integers at all. A ValueError names the first element that is no token id."""
    if isinstance(prompt, torch.Tensor) or type(prompt).__module__ == "numpy":
        if getattr(prompt, "ndim", None) != 1:
            return None
        prompt = prompt.tolist()  # type: ignore[union-attr]
    if not isinstance(prompt, (list, tuple)):
        return None
    for i, token in enumerate(prompt):
        if not _is_token(token):
            raise ValueError(f"prompt[{i}] is {token!r} ({type(token).__name__}): a token-id "
                             "prompt holds integers only.")
    return [operator.index(token) for token in prompt]


class StepError(RuntimeError):
    """A step failed. Its requests (`request_ids`) were aborted, their pages freed; every
    other request and the engine itself go on."""

    def __init__(self, message: str, request_ids: list[int]) -> None:
        super().__init__(message)
        self.request_ids = request_ids


class LLM:
    """A Qwen3 inference engine: paged KV cache, continuous batching, packed batches.

    model: a name or folder for `resolve_model` ("tiny", "random:qwen3-0.6b", a path).
    device/dtype: default CUDA + bfloat16 when available, else CPU + float32.
    attention_backend: "auto" (FlashInfer on CUDA when it can run this model: bfloat16 or
        float16, a head_dim it has kernels for; else torch), "torch", "flashinfer" (a
        ValueError if it cannot run); `self.backend_reason` says why.
    page_size: tokens per KV page (any >= 1). num_pages: pages for requests; None sizes them
        from kv_cache_bytes (default 1 GiB on CPU, the free memory up to 90% on CUDA). With
        CUDA graphs the pool holds one page more, the padding page of padded decode batches.
    max_num_seqs: requests running at once. max_num_batched_tokens: tokens per step (longer
        prompts are prefilled in chunks). max_model_len: context limit (default: the config's).
    enforce_eager: no CUDA graphs. skip_tokenizer_init: token-id prompts only, text is "".
    tensor_parallel_size: processes that split every layer's heads between them (engine/
        parallel.py): gloo on CPU, NCCL on CUDA; checked before any process starts. Call
        `close()` (or use `with LLM(...) as llm:`) to stop them.
    quantization: None, "int8" or "int4" (CPU): weight-only, through torchao, for the linear
        layers and the LM head; the embedding stays exact (engine/quantization.py).
    tune_kernels: on a CPU, time each layer's product in a few formulations per row count
        once (cached under $MINIMODEL_HOME) and run the fastest; `self.kernel_choices` says
        what was chosen (engine/kernel_choice.py). False: F.linear everywhere. CUDA: F.linear.
    enable_prefix_caching: keep the full KV pages of earlier requests in a radix tree and
        start each new request after the longest prefix it holds (engine/radix_cache.py);
        `RequestOutput.metrics.cached_tokens` says how many prompt tokens were not computed
        again. False: every prompt is computed from its first token.
    speculative_model, num_speculative_tokens: speculative decoding (engine/spec_decode.py):
        "ngram" (prompt lookup in the request's own tokens) or a draft model with the same
        tokenizer ("bard-draft", a folder) proposes k tokens per request and decode step, the
        model checks them in one forward, and exact rejection sampling keeps what it would
        have produced itself (greedy: the same tokens). `RequestOutput.metrics` counts the
        drafts and accepted tokens; `spec_decode_stats()` sums them.
    """

    def __init__(self, model: str | os.PathLike[str] = "tiny", **settings: Any) -> None:
        # Every setting checked once, in one frozen object that the scheduler, the runner and
        # each tensor-parallel worker are built from (engine/config.py).
        config = EngineConfig.create(model, **check_settings(settings))
        self.device, self.folder, self.cfg = config.device, config.folder, config.hf_config
        self.dtype, self.max_model_len = config.dtype, config.max_model_len
        self.tensor_parallel_size = config.tensor_parallel_size
        self.backend_name, self.backend_reason = config.attention_backend, config.backend_reason
        if self.device.type == "cuda" and self.device.index is not None:
            torch.cuda.set_device(self.device)  # kernels, graph capture and FlashInfer use it
        self.model = load_shard(config, 0, self.device)  # rank 0's shards (all, with one rank)
        self.quantization = config.quantization
        self.kernel_choices = self.model.kernel_choices  # rank 0's, measured or read (CPU)
        self.config = config = config.with_pool()  # sized once the weights take their memory
        self.runner = (ModelRunner(config, self.model) if config.tensor_parallel_size == 1
                       else parallel.ParallelRunner(config, self.model))
        self.kv_cache = self.runner.kv_cache
        self.allocator = RefCountedAllocator(config.num_pages)  # pages 0 .. num_pages - 1
        self.prefix_cache = (RadixCache(self.allocator, config.page_size)
                             if config.enable_prefix_caching else None)
        if config.graphs_off:
            self.cuda_graphs_reason = f"off: {config.graphs_off}"
        else:
            self.runner.capture_cuda_graphs()
            self.cuda_graphs_reason = (
                f"on: decode graphs for batch sizes {self.runner.graphs.batch_sizes}"
            )
        self.scheduler = Scheduler(
            self.allocator, config.page_size, config.max_num_seqs,
            config.max_num_batched_tokens, config.max_model_len, cache=self.prefix_cache,
        )
        self.speculator = (SpeculativeDecoder(config, self.runner, self.scheduler)
                           if config.speculative_model is not None else None)
        self.skip_tokenizer_init = config.skip_tokenizer_init
        self._tokenizer: Tokenizer | None = None
        self._next_id = 0
        self._active: dict[int, Sequence] = {}
        self._unclaimed: list[RequestOutput] = []  # finished during another call's generate()
        self.last_batch: ScheduledBatch | None = None  # what the latest step ran (for tracing)

    # --- set-up --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the tensor-parallel workers, if any (idempotent; nothing to do with one rank)."""
        self.runner.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def tokenizer(self) -> Tokenizer:
        """The checkpoint's tokenizer, loaded on first use."""
        if self.skip_tokenizer_init:
            raise ValueError("This LLM was built with skip_tokenizer_init=True: it takes token-id "
                             "prompts only and has no text; drop the flag to use text.")
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.folder)
        return self._tokenizer

    # --- requests ------------------------------------------------------------------------

    def _make_sequence(self, prompt: Prompt, params: SamplingParams, stream: bool) -> Sequence:
        """Check one request completely, before anything is queued; raise ValueError if bad."""
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}.")
        params.validate()
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
        elif (token_ids := _token_ids(prompt)) is not None:
            ids = token_ids
        else:
            raise ValueError(
                f"A prompt must be a str or a list of int token ids, got {prompt!r:.80} "
                f"({type(prompt).__name__})."
            )
        if not ids:
            raise ValueError("The prompt is empty: give at least one token.")
        bad = [t for t in ids if not 0 <= t < self.cfg.vocab_size]
        if bad:
            raise ValueError(f"Token id {bad[0]} is outside the vocabulary [0, "
                             f"{self.cfg.vocab_size}).")
        if len(ids) > self.max_model_len:
            raise ValueError(f"The prompt has {len(ids)} tokens, more than the context length "
                             f"max_model_len={self.max_model_len}; shorten it.")
        if pages_needed(len(ids) + 1, self.kv_cache.page_size) > self.allocator.num_pages:
            raise ValueError(
                f"The prompt ({len(ids)} tokens) does not fit in the KV cache "
                f"({self.allocator.num_pages} pages of {self.kv_cache.page_size}); "
                "raise num_pages or kv_cache_bytes."
            )
        V = self.cfg.vocab_size
        if params.stop_token_ids and not all(t < V for t in params.stop_token_ids):
            raise ValueError(f"SamplingParams.stop_token_ids {params.stop_token_ids} has an id "
                             f"outside the vocabulary [0, {V}).")
        if params.num_logprobs is not None and params.num_logprobs > V:
            raise ValueError(f"SamplingParams.logprobs={params.logprobs} asks for more tokens "
                             f"than the vocabulary has ({V}).")
        if params.stop and self.skip_tokenizer_init:
            raise ValueError("Stop strings need a tokenizer; this LLM has skip_tokenizer_init.")
        needs_text = stream or bool(params.stop)
        seq = Sequence(
            self._next_id, ids, params,
            generator=self.runner.sampler.make_generator(params.seed),
            detokenizer=(IncrementalDetokenizer(self.tokenizer, params.skip_special_tokens)
                         if needs_text else None),
            eos_token_ids=self.config.eos_token_ids,
        )
        self._next_id += 1
        return seq

    def add_request(self, prompt: Prompt, params: SamplingParams | None = None) -> int:
        """Queue one request (after checking it); returns its request_id."""
        return self._add([self._make_sequence(prompt, params or SamplingParams(), False)])[0]

    def _add(self, seqs: list[Sequence]) -> list[int]:
        for seq in seqs:
            self._active[seq.request_id] = seq
            if seq.params.max_tokens == 0:
                self.scheduler.finish(seq, "length")  # nothing to generate
            else:
                self.scheduler.add(seq)
        return [s.request_id for s in seqs]

    def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache (vLLM's name): every cached page that no unfinished request
        holds returns to the pool. True if the cache is empty now; False if running requests
        still share some of its pages, or there is no prefix cache."""
        return self.scheduler.reset_cache()

    def prefix_cache_stats(self) -> dict[str, int | float]:
        """The prefix cache seen from outside: pages in it, pages only it holds (evictable),
        and the hit rate: prompt tokens found in it / prompt tokens admitted (0 when off).
        Plain counters: another thread may read them while the engine steps."""
        sched, cache = self.scheduler, self.prefix_cache
        return {
            "cached_pages": cache.num_pages if cache is not None else 0,
            "evictable_pages": self.allocator.num_evictable,
            "hit_rate": sched.num_hit_tokens / sched.num_queried_tokens
            if sched.num_queried_tokens else 0.0,
        }

    def spec_decode_stats(self) -> dict[str, int | float]:
        """Speculative decoding since the engine started: draft tokens checked, accepted, the
        acceptance rate, tokens emitted per request and verify step (accepted + 1, or fewer
        when a run ended the request), and the seconds spent drafting, verifying (the
        target's forward) and accepting (sampling, appending, rolling back). Zeros when off."""
        st = dict(self.speculator.stats) if self.speculator is not None else {
            "draft_tokens": 0, "accepted_tokens": 0, "verify_rows": 0, "emitted_tokens": 0,
            "draft_s": 0.0, "verify_s": 0.0, "accept_s": 0.0}
        rows, emitted = st.pop("verify_rows"), st.pop("emitted_tokens")
        st["acceptance_rate"] = (st["accepted_tokens"] / st["draft_tokens"]
                                 if st["draft_tokens"] else 0.0)
        st["tokens_per_step"] = emitted / rows if rows else 0.0
        return st

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def abort(self, request_id: int) -> bool:
        """Cancel a request: it never appears in `step()`'s outputs, and if it was still
        unfinished (True is returned) its pages are back in the pool at once. False: the id is
        unknown or the request had already finished. Call it from the thread that calls step()."""
        self._unclaimed = [o for o in self._unclaimed if o.request_id != request_id]
        seq = self._active.pop(request_id, None)
        if seq is None or seq.is_finished:
            return False
        self.scheduler.abort(seq)
        return True

    def get_request(self, request_id: int) -> Sequence | None:
        """The engine's live view of a request that has not been collected yet (its tokens so
        far: `output_token_ids`, `logprobs`), or None. Read it between steps; do not change it."""
        return self._active.get(request_id)

    # --- the engine loop -------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one step; return the requests that finished (in any earlier step too).

        If the step fails (the model, the sampler, the scheduler raised), the requests it ran
        are aborted, so that the next step runs without them, and StepError says which; if it
        failed before it had a batch, every unfinished request is. Nothing half-done stays.
        """
        batch = None
        try:
            batch = self.scheduler.schedule()
            self.last_batch = batch
            if batch is not None and self.speculator is not None:
                if batch.is_prefill:
                    self.speculator.prefill(batch, self._run)
                else:  # draft, verify, accept (engine/spec_decode.py)
                    self.speculator.decode(batch)
            elif batch is not None:
                self._run(batch)
            elif self.scheduler.has_unfinished():
                raise RuntimeError(f"The scheduler cannot make progress: "
                                   f"{self.scheduler.waiting}")
        except BaseException as err:  # Ctrl-C too: a half-run step must not stay behind
            failed = ([s.request_id for s in batch.seqs] if batch is not None
                      else [rid for rid, s in self._active.items() if not s.is_finished])
            for rid in failed:
                self.abort(rid)
            if not isinstance(err, Exception):
                raise
            raise StepError(f"The step failed ({type(err).__name__}: {err}); its requests "
                            f"{failed} were aborted.", failed) from err
        return self._collect_finished()

    def _run(self, batch: ScheduledBatch) -> None:
        """Run one batch on the model, sample, and advance its requests."""
        # The sampler reads the sampled requests' tokens (min_tokens, penalties).
        sampled = [s for s, m in zip(batch.seqs, batch.sample_mask, strict=True) if m]
        sampler = self.runner.sampler
        with sampler.batch(sampled):
            tokens, logprobs = self.runner.run(batch)
        self.scheduler.postprocess(batch, tokens, logprobs)
        for seq, top in zip(sampled, sampler.last_top_logprobs):
            seq.num_steps += 1
            if top is not None:
                seq.top_logprobs.append(top)

    def _collect_finished(self) -> list[RequestOutput]:
        done = [s for s in self._active.values() if s.is_finished]
        outputs = self._unclaimed + [self._output(s) for s in done]
        self._unclaimed = []
        for seq in done:
            del self._active[seq.request_id]
        return outputs

    def _output(self, seq: Sequence) -> RequestOutput:
        if seq.detokenizer is not None:
            seq.detokenizer.flush()
            text = seq.detokenizer.text[: seq.stop_text_len]
        elif self.skip_tokenizer_init:
            text = ""
        else:
            text = self.tokenizer.decode(seq.output_text_ids(),
                                         skip_special_tokens=seq.params.skip_special_tokens)
        first = seq.first_token_time or seq.finish_time
        n = seq.num_output_tokens
        return RequestOutput(
            request_id=seq.request_id,
            prompt_token_ids=seq.token_ids[: seq.num_prompt_tokens],
            token_ids=seq.output_token_ids,
            text=text,
            finish_reason=seq.finish_reason or "length",
            logprobs=list(seq.logprobs) if seq.params.num_logprobs is not None else None,
            metrics=RequestMetrics(
                ttft_s=first - seq.arrival_time,
                tpot_s=(seq.finish_time - first) / (n - 1) if n > 1 else 0.0,
                e2e_s=seq.finish_time - seq.arrival_time,
                prompt_tokens=seq.num_prompt_tokens,
                generated_tokens=n,
                num_preemptions=seq.num_preemptions,
                cached_tokens=seq.num_cached_prompt_tokens or 0,
                draft_tokens=seq.num_draft_tokens,
                accepted_tokens=seq.num_accepted_tokens,
                steps=seq.num_steps,
            ),
            top_logprobs=([list(t) for t in seq.top_logprobs]
                          if seq.params.num_logprobs is not None else None),
            stop_reason=self._stop_reason(seq),
        )

    @staticmethod
    def _stop_reason(seq: Sequence) -> int | str | None:
        return seq.stop_token_id if seq.stop_token_id is not None else seq.stop_string

    # --- convenience -----------------------------------------------------------------------

    def generate(
        self,
        prompts: Prompt | SequenceABC[Prompt],
        params: SamplingParams | SequenceABC[SamplingParams] | None = None,
        use_tqdm: bool | None = None,
    ) -> list[RequestOutput]:
        """Run prompts (str or token-id lists) to completion; outputs in prompt order.

        params: one SamplingParams for all, or one per prompt. Every request is checked before
        any is queued. use_tqdm: a progress bar (default: for 16 prompts or more).
        """
        array = isinstance(prompts, torch.Tensor) or type(prompts).__module__ == "numpy"
        if isinstance(prompts, str) or (array and getattr(prompts, "ndim", 0) == 1) or (
            isinstance(prompts, (list, tuple)) and prompts and _is_token(prompts[0])
        ):
            prompts = [prompts]  # one prompt
        elif not (array or isinstance(prompts, SequenceABC)):
            raise ValueError(f"prompts must be a str, a list of token ids, or a list of those; "
                             f"got {prompts!r:.80} ({type(prompts).__name__}).")
        prompts = list(prompts)
        params = params if params is not None else SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if not isinstance(params, (list, tuple)) or not all(
                isinstance(sp, SamplingParams) for sp in params):
            raise ValueError(f"params must be a SamplingParams or a list of them (one per "
                             f"prompt), got {params!r:.80}.")
        if len(params) != len(prompts):
            raise ValueError(f"Got {len(prompts)} prompts but {len(params)} SamplingParams.")
        ids = self._add([self._make_sequence(p, sp, False) for p, sp in zip(prompts, params,
                                                                              strict=True)])
        wanted = set(ids)
        results: dict[int, RequestOutput] = {}
        bar = None
        if use_tqdm or (use_tqdm is None and len(prompts) >= 16):
            from tqdm.auto import tqdm

            bar = tqdm(total=len(prompts), desc="generate", unit="req")
        try:
            while len(results) < len(ids):
                for out in self.step():
                    if out.request_id in wanted:
                        results[out.request_id] = out
                        if bar is not None:
                            bar.update(1)
                    else:
                        self._unclaimed.append(out)
        finally:  # an error or Ctrl-C: nobody will collect the rest, so they stop now
            for rid in wanted - results.keys():
                self.abort(rid)
            if bar is not None:
                bar.close()
        return [results[i] for i in ids]

    def chat(
        self,
        messages: SequenceABC[dict] | SequenceABC[SequenceABC[dict]],
        sampling_params: SamplingParams | SequenceABC[SamplingParams] | None = None,
        use_tqdm: bool | None = None,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict | None = None,
    ) -> list[RequestOutput]:
        """Answer one conversation (a list of {"role", "content"} messages) or several (a list
        of those), as vLLM's `LLM.chat`: each is rendered with the model's chat template
        (`chat_template_kwargs`, e.g. {"enable_thinking": False}, go to the template), then
        generated like `generate`; outputs in conversation order."""
        if self.skip_tokenizer_init:
            raise ValueError("chat needs the tokenizer: create the LLM without "
                             "skip_tokenizer_init=True.")
        one = isinstance(messages, SequenceABC) and bool(messages) and isinstance(messages[0],
                                                                                  dict)
        conversations = [messages] if one else messages
        if not isinstance(conversations, SequenceABC) or not conversations or not all(
                isinstance(c, SequenceABC) and c and all(isinstance(m, dict) for m in c)
                for c in conversations):
            raise ValueError("messages must be a conversation (a non-empty list of "
                             "{'role': ..., 'content': ...} dicts) or a list of conversations; "
                             f"got {messages!r:.80}.")
        kwargs = dict(chat_template_kwargs or {})
        for key in ("tokenize", "add_generation_prompt"):
            if key in kwargs:
                raise ValueError(f"chat_template_kwargs may not set {key!r}: chat sets it "
                                 "(pass add_generation_prompt=... to chat itself).")
        prompts = [self.tokenizer.apply_chat_template(
            list(conv), add_generation_prompt=add_generation_prompt, tokenize=True, **kwargs)
            for conv in conversations]
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    def stream(self, prompt: Prompt, params: SamplingParams | None = None) -> Iterator[str]:
        """Yield the generated text in pieces as it is produced; "".join(pieces) is the
        `text` that `generate` gives (special tokens and what ended the request left out).

        A piece never ends inside a multi-byte character. With stop strings, the last
        len(stop) - 1 characters are held back until it is clear they do not start one.
        """
        params = params or SamplingParams()
        seq = self._make_sequence(prompt, params, stream=True)
        self._add([seq])
        pieces = TextStream(seq.detokenizer, params.stop)  # type: ignore[arg-type]
        try:
            while not seq.is_finished:
                for out in self.step():
                    if out.request_id != seq.request_id:
                        self._unclaimed.append(out)
                if seq.is_finished:
                    break
                if piece := pieces.push():
                    yield piece
        finally:  # closed early, an error, Ctrl-C: the request stops and its pages come back
            if not seq.is_finished:
                self.abort(seq.request_id)
        self._active.pop(seq.request_id, None)  # finished before any step (max_new_tokens=0)
        seq.detokenizer.flush()  # type: ignore[union-attr]
        if rest := pieces.flush(seq.detokenizer.text[: seq.stop_text_len]):  # type: ignore
            yield rest
