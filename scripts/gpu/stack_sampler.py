"""A wall-clock stack sampler for one engine start, in this process and in the children it forks.

A daemon thread reads every thread's Python stack each `interval` seconds (`sys._current_frames`). Forked
children (vLLM's engine core when it forks) start their own sampler through `os.register_at_fork`. Each
process writes `PREFIX-PID.txt`:
  - a timeline: for each `bucket` seconds and each thread, the innermost frames of its most frequent stack;
  - the functions by inclusive samples (the share of the samples whose stack held them).
Times are seconds on `time.perf_counter()`, from `t0`; a forked child's clock is its parent's.
Nothing here needs ptrace (py-spy cannot attach inside the GPU machine's container).
"""

from __future__ import annotations

import collections
import os
import re
import sys
import threading
import time

_SKIP = ("threading.py", "stack_sampler.py", "selectors.py", "queues.py")


def _frame_name(code, line: int) -> str:
    path = code.co_filename
    for marker in ("site-packages/", "/studio/", "/scripts/"):
        if marker in path:
            tail = path.split(marker, 1)[1]
            path = tail if marker == "site-packages/" else marker.strip("/") + "/" + tail
            break
    else:
        path = re.sub(r"^.*/lib/python3\.\d+/", "", path)  # the standard library
    return f"{path}:{code.co_name}:{line}"


class StackSampler:
    def __init__(
        self, prefix: str, t0: float, interval: float = 0.01, duration: float = 120.0, bucket: float = 0.5
    ):
        self.prefix, self.t0, self.interval, self.duration, self.bucket = (
            prefix,
            t0,
            interval,
            duration,
            bucket,
        )
        self.samples: list[tuple[float, str, tuple[str, ...]]] = []
        self._stop = threading.Event()

    def start(self) -> StackSampler:
        threading.Thread(target=self._run, name="stack-sampler", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.write()

    def _run(self) -> None:
        me, begun, written = threading.get_ident(), time.perf_counter(), time.perf_counter()
        while not self._stop.wait(self.interval) and time.perf_counter() - begun < self.duration:
            now = time.perf_counter() - self.t0
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                stack = []
                while frame is not None:
                    if not frame.f_code.co_filename.endswith(_SKIP):
                        stack.append(_frame_name(frame.f_code, frame.f_lineno))
                    frame = frame.f_back
                if stack:
                    self.samples.append((now, names.get(ident, str(ident)), tuple(reversed(stack))))
            if time.perf_counter() - written > 1.0:  # a child may end by os._exit: keep a recent copy
                self.write()
                written = time.perf_counter()
        self.write()

    def write(self) -> None:
        samples = list(self.samples)
        lines = [
            f"# pid {os.getpid()}, {len(samples)} samples every {self.interval * 1000:.0f} ms",
            "",
            "## timeline",
        ]
        buckets: dict[tuple[int, str], collections.Counter] = collections.defaultdict(collections.Counter)
        for t, thread, stack in samples:
            buckets[(int(t / self.bucket), thread)][stack] += 1
        for (index, thread), counter in sorted(buckets.items()):
            stack, count = counter.most_common(1)[0]
            tail = " < ".join(reversed(stack[-4:]))
            lines.append(
                f"{index * self.bucket:7.1f} s {thread:14.14s} {count:3d}/{sum(counter.values()):3d} {tail}"
            )
        lines += [
            "",
            "## inclusive (per thread: samples holding the function, share of that thread's samples)",
        ]
        per_thread: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        totals: collections.Counter = collections.Counter()
        for _t, thread, stack in samples:
            totals[thread] += 1
            for name in {frame.rsplit(":", 1)[0] for frame in stack}:
                per_thread[thread][name] += 1
        for thread, counter in sorted(per_thread.items(), key=lambda item: -totals[item[0]]):
            lines.append(f"### {thread}: {totals[thread]} samples ({totals[thread] * self.interval:.1f} s)")
            for name, count in counter.most_common(45):
                lines.append(f"{count * self.interval:7.2f} s {100 * count / totals[thread]:5.1f}% {name}")
        tmp = f"{self.prefix}-{os.getpid()}-{threading.get_ident()}.txt.tmp"
        with open(tmp, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        os.replace(tmp, f"{self.prefix}-{os.getpid()}.txt")


def _sample_child(prefix: str, t0: float, options: dict) -> None:
    import multiprocessing.util

    sampler = StackSampler(prefix, t0, **options).start()
    # a multiprocessing child ends by os._exit after running these finalizers: write its last samples
    multiprocessing.util.Finalize(None, sampler.write, exitpriority=100)


def sample_this_and_forks(prefix: str, t0: float, **options) -> StackSampler:
    """Sample this process now and every child it forks from here on."""
    os.register_at_fork(after_in_child=lambda: _sample_child(prefix, t0, options))
    return StackSampler(prefix, t0, **options).start()
