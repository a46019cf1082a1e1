"""Checks of chapter 11 (serving): sse_events, merge_stream, timed_stream and sweep.

`sse_events` parses the server's `text/event-stream` bytes as they arrive, `merge_stream` turns a
stream's events back into the answer the same request gets without streaming, `timed_stream`
measures a request's TTFT and TPOT on the client's side, and `sweep` runs a fair concurrency
sweep. The checks try them on synthetic streams (cut into chunks at random, with a clock the check
controls) and on the real server of minimodel.serve. Timings are never compared: a check that
measures time only checks which clock readings a number was computed from.

One job per module:
- sse, merge, timed, sweep: the checks of sse_events, merge_stream, timed_stream and sweep, each
  with its own answer (reference_events, reference_merge, reference_timing, nearest_rank) and
  the streams or stand-in server it tries them on;
- server: `served`, the real server of the tiny model on 127.0.0.1 and a free port, one for
  each check that needs one, and the requests the checks send it;
- common: seeded random ints, the words of the synthetic streams, and those streams.

Importing this package registers every check.
"""

from minimodel.grading.ch11 import merge, server, sse, sweep, timed
from minimodel.grading.ch11.merge import reference_merge
from minimodel.grading.ch11.server import served
from minimodel.grading.ch11.sse import reference_events
from minimodel.grading.ch11.sweep import SWEEP_LEVELS, SWEEP_PROMPTS, nearest_rank
from minimodel.grading.ch11.timed import reference_timing

__all__ = [
    "SWEEP_LEVELS",
    "SWEEP_PROMPTS",
    "merge",
    "nearest_rank",
    "reference_events",
    "reference_merge",
    "reference_timing",
    "served",
    "server",
    "sse",
    "sweep",
    "timed",
]
