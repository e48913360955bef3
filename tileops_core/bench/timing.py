"""Timing a call properly: warm-up, many repetitions, the median, subjects interleaved.

A :class:`Subject` is something to time: one zero-argument callable per rotated input set
(calls cycle through the sets so that, on a GPU, consecutive calls do not find their
inputs in L2) and an optional ``reset`` that restores mutated inputs between samples,
untimed (a decode step applied ten thousand times to one state would otherwise time a
state that has drifted to inf/NaN). Several subjects (the op and its baseline) are timed
*interleaved*, sample by sample, so that a machine that speeds up or slows down during
the run moves both figures alike and their ratio stays honest.

* CPU (:func:`time_cpu`): ``time.perf_counter`` around a batch of calls long enough to
  make timer resolution irrelevant (``sample_s``), garbage collection off while timing.
* CUDA (:func:`time_cuda`): the calls of one sample are captured once into a CUDA graph
  (after a warm-up on a side stream, as capture requires) and each sample is one graph
  replay between two ``torch.cuda.Event`` records: no host overhead, no launch gaps. A
  subject whose capture fails (a host sync inside the call, say) is timed by events
  around eager calls instead, and the measurement says so in ``note``.

Reported figures are per call: the median over samples, with the 10th and 90th
percentiles as the spread.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

__all__ = ["Subject", "Measurement", "TimingOptions", "QUICK", "DEFAULT", "time_cpu", "time_cuda", "time_subjects"]


@dataclass
class Subject:
    """What to time: one call per rotated input set, and how to restore mutated inputs."""

    name: str
    calls: Sequence[Callable[[], Any]]
    reset: Callable[[], None] | None = None
    #: False: on CUDA, time eager launches with events even if the calls could be captured.
    graph: bool = True


@dataclass(frozen=True)
class Measurement:
    """Per-call times of one subject, in seconds."""

    method: str  # "cpu-wallclock" | "cuda-graph" | "cuda-events"
    median_s: float
    p10_s: float
    p90_s: float
    samples: int
    calls_per_sample: int
    note: str = ""


@dataclass(frozen=True)
class TimingOptions:
    """How long to measure. A subject is sampled until it has ``min_samples`` samples *and*
    ``min_time_s`` of timed calls, or ``max_samples``, or ``max_time_s`` (then with at least
    three samples): one slow call (a prefill-sized row on a CPU) does not take minutes."""

    warmup: int = 3
    min_samples: int = 15
    max_samples: int = 2000
    min_time_s: float = 0.5
    max_time_s: float = 5.0
    sample_s: float = 2e-3
    max_calls_per_sample: int = 1000


#: The default: enough samples that the median is stable on a shared machine.
DEFAULT = TimingOptions()
#: ``tileops bench --quick``: a representative figure in a fraction of a second per subject.
QUICK = TimingOptions(warmup=2, min_samples=7, min_time_s=0.08, max_time_s=1.0, sample_s=1e-3)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _summarise(method: str, per_call: list[float], calls: int, note: str = "") -> Measurement:
    return Measurement(method, statistics.median(per_call), _percentile(per_call, 0.1), _percentile(per_call, 0.9),
                       len(per_call), calls, note)


class _Sampler:
    """The stopping rule shared by both timers."""

    def __init__(self, options: TimingOptions) -> None:
        self.options = options
        self.per_call: list[float] = []
        self.timed = 0.0

    def add(self, seconds: float, calls: int) -> None:
        self.per_call.append(seconds / calls)
        self.timed += seconds

    def done(self) -> bool:
        o, n = self.options, len(self.per_call)
        if n >= o.max_samples:
            return True
        if n >= o.min_samples and self.timed >= o.min_time_s:
            return True
        return n >= 3 and self.timed >= o.max_time_s


def _run(subject: Subject, start: int, count: int) -> None:
    calls = subject.calls
    n = len(calls)
    for i in range(start, start + count):
        calls[i % n]()


def _warm_up(subject: Subject, options: TimingOptions) -> None:
    """``warmup`` passes over the input sets, but no more than ``min_time_s`` of them after the
    first: a call that takes seconds (a prefill row on a CPU) is warm after one pass."""
    t0 = time.perf_counter()
    for i in range(max(options.warmup, 1)):
        if i and time.perf_counter() - t0 >= options.min_time_s:
            break
        if subject.reset:
            subject.reset()
        _run(subject, 0, len(subject.calls))


def time_cpu(subjects: Sequence[Subject], options: TimingOptions = DEFAULT) -> list[Measurement]:
    """Wall-clock medians of each subject's calls on the CPU, sampled interleaved."""
    batch: list[int] = []
    samplers = [_Sampler(options) for _ in subjects]
    for subject, sampler in zip(subjects, samplers):
        _warm_up(subject, options)
        calls = max(1, len(subject.calls))
        while True:  # calls per sample: double until one sample lasts sample_s; that one counts
            if subject.reset:
                subject.reset()
            t0 = time.perf_counter()
            _run(subject, 0, calls)
            elapsed = time.perf_counter() - t0
            if elapsed >= options.sample_s or calls >= options.max_calls_per_sample:
                sampler.add(elapsed, calls)
                break
            calls = min(calls * 2, options.max_calls_per_sample)
        batch.append(calls)
    enabled = gc.isenabled()
    gc.disable()
    try:
        while not all(s.done() for s in samplers):
            for subject, sampler, calls in zip(subjects, samplers, batch):
                if sampler.done():
                    continue
                if subject.reset:
                    subject.reset()
                t0 = time.perf_counter()
                _run(subject, 0, calls)
                sampler.add(time.perf_counter() - t0, calls)
    finally:
        if enabled:
            gc.enable()
    return [_summarise("cpu-wallclock", s.per_call, calls) for s, calls in zip(samplers, batch)]


class _CudaReplay:
    """One subject on the GPU: a captured graph of ``calls`` calls, or eager calls timed by events."""

    def __init__(self, subject: Subject, options: TimingOptions, device: Any) -> None:
        import torch

        self.subject, self.device, self.torch = subject, device, torch
        self.graph: Any = None
        self.note = ""
        n = max(1, len(subject.calls))
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # capture needs warmed-up allocations and lazy inits off the capture stream
            _run(subject, 0, max(options.warmup, 1) * n)
        torch.cuda.current_stream(device).wait_stream(side)
        one = self._eager_time(n) / n
        want = max(n, int(options.sample_s / max(one, 1e-7)))
        self.calls = min(options.max_calls_per_sample, ((want + n - 1) // n) * n)
        self.calls = max(self.calls, n)
        if not subject.graph:
            self.note = "eager launches timed with events (this subject is not captured by design)"
            return
        if subject.reset:
            subject.reset()
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                _run(subject, 0, self.calls)
        except RuntimeError as exc:  # not capturable (a host sync in the call): time eager launches
            torch.cuda.synchronize(device)
            self.note = f"CUDA graph capture failed, timed eager launches with events: {str(exc).splitlines()[0]}"
        else:
            self.graph = graph

    def _eager_time(self, calls: int) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        _run(self.subject, 0, calls)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def sample(self) -> float:
        """Seconds for ``self.calls`` calls (one graph replay, or eager calls)."""
        torch = self.torch
        if self.subject.reset:
            self.subject.reset()  # enqueued before the start event: untimed
        if self.graph is None:
            return self._eager_time(self.calls)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def time_cuda(subjects: Sequence[Subject], options: TimingOptions = DEFAULT, device: Any = None) -> list[Measurement]:
    """Per-call medians on a CUDA device: CUDA-graph replays between events, sampled interleaved."""
    import torch

    device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    with torch.cuda.device(device):
        replays = [_CudaReplay(s, options, device) for s in subjects]
        samplers = [_Sampler(options) for _ in subjects]
        while not all(s.done() for s in samplers):
            for replay, sampler in zip(replays, samplers):
                if not sampler.done():
                    sampler.add(replay.sample(), replay.calls)
    return [_summarise("cuda-graph" if r.graph is not None else "cuda-events", s.per_call, r.calls, r.note)
            for r, s in zip(replays, samplers)]


def time_subjects(subjects: Sequence[Subject], device: Any, options: TimingOptions = DEFAULT) -> list[Measurement]:
    """Time on whatever ``device`` is (CPU or CUDA); another device type is timed by wall clock
    around a synchronize, and says so."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return time_cuda(subjects, options, device)
    if device.type == "cpu":
        return time_cpu(subjects, options)
    module = getattr(torch, device.type, None)
    sync = getattr(module, "synchronize", None)
    if sync is None:
        return time_cpu(subjects, options)

    def synced(subject: Subject) -> Subject:
        calls = list(subject.calls)
        last = calls[-1]

        def last_synced() -> None:
            last()
            sync()

        reset = subject.reset
        if reset is None:
            return replace(subject, calls=calls[:-1] + [last_synced])

        def reset_synced() -> None:  # the restore's copies are queued: done before the clock starts (found
            reset()                  # in review: they were waited for inside the sample's last call)
            sync()

        return replace(subject, calls=calls[:-1] + [last_synced], reset=reset_synced)

    note = f"{device.type}: wall clock around {device.type}.synchronize() after each input rotation"
    return [replace(m, method=f"{device.type}-wallclock", note=note)
            for m in time_cpu([synced(s) for s in subjects], options)]
