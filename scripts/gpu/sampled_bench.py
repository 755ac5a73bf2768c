"""`cosyvoice-studio bench ...` with every thread of its process sampled (`stack_sampler.py`): where the chunk
scheduler's host time goes in a workload level, read on the GPU machine (py-spy cannot attach there).

    python3 scripts/gpu/sampled_bench.py PREFIX BENCH-ARGS...

writes PREFIX-PID.txt (a timeline per thread and the functions by inclusive time, per thread; the
`flow-scheduler` thread is the chunk scheduler) beside bench's own output, and exits with bench's status.
"""

from __future__ import annotations

import os
import sys
import time

T0 = time.perf_counter()


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from stack_sampler import StackSampler

    prefix, bench_args = sys.argv[1], sys.argv[2:]
    sampler = StackSampler(prefix, T0, interval=0.01, duration=900.0).start()
    from studio.cli import main as studio_main

    sys.argv = ["cosyvoice-studio", "bench", *bench_args]
    try:
        return studio_main()
    finally:
        sampler.stop()


if __name__ == "__main__":
    sys.exit(main())
