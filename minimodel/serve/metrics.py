"""GET /metrics: the server's counters in Prometheus' text format, with vLLM's metric names
under a `minimodel:` prefix.

    gauges      minimodel:num_requests_running, minimodel:num_requests_waiting,
                minimodel:kv_cache_usage_perc (0..1), minimodel:kv_cache_used_pages,
                minimodel:kv_cache_free_pages, minimodel:kv_cache_total_pages,
                minimodel:prefix_cache_pages, minimodel:prefix_cache_evictable_pages (read
                when scraped)
    counters    minimodel:prompt_tokens_total, minimodel:generation_tokens_total,
                minimodel:request_success_total{finished_reason="stop"|"length"|"abort"},
                minimodel:num_preemptions_total, minimodel:prefix_cache_queries_total and
                minimodel:prefix_cache_hits_total (prompt tokens looked up / found cached),
                minimodel:spec_decode_num_draft_tokens_total and
                minimodel:spec_decode_num_accepted_tokens_total (speculative decoding)
    histograms  minimodel:time_to_first_token_seconds, minimodel:time_per_output_token_seconds,
                minimodel:e2e_request_latency_seconds (the engine's own timestamps)

Every metric carries a `model_name` label. Each app has its own CollectorRegistry, so that
several servers in one process (tests, notebooks) keep their counts apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from minimodel.engine.outputs import RequestOutput
    from minimodel.serve.engine_loop import EngineLoop

PREFIX = "minimodel:"
# Seconds, from a fast GPU step to a slow CPU one; the last bucket is +Inf.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0, 120.0, 300.0, 900.0)
TPOT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
               600.0, 1800.0, 3600.0)


class ServerMetrics:
    """The metrics of one server. `prompt()`, `generated()`, `finished()` and `aborted()` are
    called from the event loop as requests move; the gauges read `engine.stats()` when
    /metrics is scraped."""

    def __init__(self, engine: EngineLoop, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"model_name": model_name}

        def gauge(name: str, doc: str, read) -> None:
            g = Gauge(PREFIX + name, doc, list(labels), registry=self.registry)
            g.labels(**labels).set_function(read)

        def stats() -> dict[str, int]:
            return engine.stats()

        gauge("num_requests_running", "Requests decoding in the engine now.",
              lambda: stats()["running"])
        gauge("num_requests_waiting", "Requests queued in the engine, not yet running.",
              lambda: stats()["waiting"])
        gauge("kv_cache_usage_perc", "Fraction of KV-cache pages in use (1 = all).",
              lambda: _used_fraction(stats()))
        gauge("kv_cache_used_pages", "KV-cache pages lent to requests.",
              lambda: stats()["num_pages"] - stats()["free_pages"])
        gauge("kv_cache_free_pages", "KV-cache pages free.", lambda: stats()["free_pages"])
        gauge("kv_cache_total_pages", "KV-cache pages in all.", lambda: stats()["num_pages"])
        gauge("prefix_cache_pages", "KV-cache pages in the prefix cache's tree.",
              lambda: stats()["cached_pages"])
        gauge("prefix_cache_evictable_pages", "Cached pages no request holds (counted free).",
              lambda: stats()["evictable_pages"])

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(PREFIX + name, doc, [*labels, *extra], registry=self.registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]):
            h = Histogram(PREFIX + name, doc, list(labels), buckets=buckets,
                          registry=self.registry)
            return h.labels(**labels)

        self._prompt = counter("prompt_tokens", "Prompt tokens of admitted requests.").labels(
            **labels)
        self._generation = counter("generation_tokens", "Tokens generated.").labels(**labels)
        self._preemptions = counter("num_preemptions", "Times a request was preempted "
                                    "(its pages taken back, recomputed later).").labels(**labels)
        self._queries = counter("prefix_cache_queries", "Prompt tokens of finished requests, "
                                "looked up in the prefix cache.").labels(**labels)
        self._hits = counter("prefix_cache_hits", "Of those, the tokens the prefix cache held."
                             ).labels(**labels)
        self._drafts = counter("spec_decode_num_draft_tokens", "Draft tokens the model "
                               "checked (speculative decoding).").labels(**labels)
        self._accepted = counter("spec_decode_num_accepted_tokens", "Of those, the tokens "
                                 "it accepted.").labels(**labels)
        self._success = counter("request_success", "Requests that ended, by finish reason.",
                                ("finished_reason",))
        self._labels = labels
        self._ttft = histogram("time_to_first_token_seconds",
                               "Arrival in the engine to the first generated token.",
                               TTFT_BUCKETS)
        self._tpot = histogram("time_per_output_token_seconds",
                               "Mean time per generated token after the first.", TPOT_BUCKETS)
        self._e2e = histogram("e2e_request_latency_seconds",
                              "Arrival in the engine to the last token.", E2E_BUCKETS)

    def prompt(self, num_tokens: int) -> None:
        self._prompt.inc(num_tokens)

    def generated(self, num_tokens: int) -> None:
        if num_tokens:
            self._generation.inc(num_tokens)

    def finished(self, out: RequestOutput) -> None:
        self._success.labels(**self._labels, finished_reason=out.finish_reason).inc()
        m = out.metrics
        self._ttft.observe(m.ttft_s)
        if m.generated_tokens > 1:
            self._tpot.observe(m.tpot_s)
        self._e2e.observe(m.e2e_s)
        if m.num_preemptions:
            self._preemptions.inc(m.num_preemptions)
        self._queries.inc(m.prompt_tokens)
        self._hits.inc(m.cached_tokens)
        self._drafts.inc(m.draft_tokens)
        self._accepted.inc(m.accepted_tokens)

    def aborted(self, count: int = 1) -> None:
        if count:
            self._success.labels(**self._labels, finished_reason="abort").inc(count)


def _used_fraction(stats: dict[str, int]) -> float:
    total = stats["num_pages"]
    return (total - stats["free_pages"]) / total if total else 0.0
