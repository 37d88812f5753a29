"""How much time fingerprinting adds to a launch (target: under 0.5 s).

Measured side by side in one run, in fresh interpreters (cold imports count, as in a
real `launch`): the launcher-side fingerprint (hardware, environment, code; no
TensorFlow), the job-side software section (distribution list), and in the job
process what finding out what the job used costs: the file-open audit hook during
`import tensorflow, keras`, then gathering the modules, distributions, libraries and
data files (launcher.record.probe.usage, with its file-hash cache warm after the first
repetition, as on every launch but the first). For scale, the job process' `import
tensorflow`. Prints medians over N repetitions and ratios.

    python benchmarks/bench_fingerprint.py [N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from common import tree_env

N = int(sys.argv[1]) if len(sys.argv) > 1 else 7

PROGRAMS = {
    "interpreter start (baseline)": "pass",
    "launcher side: collect()": (
        "import os; from launcher.record.probe import fingerprint as f; f.collect(dict(os.environ), os.getcwd(), 'x')"
    ),
    "job side: software()": "from launcher.record.probe import probes as f; f.software()",
    "job process: import tensorflow": "import tensorflow",
    "job: import tensorflow, keras": "import tensorflow, keras",
    "job: the same under the open hook": (
        "from launcher.job.observe import reads; reads.install(); import tensorflow, keras"
    ),
    "job: the same, then what it used": (
        "from launcher.job.observe import reads; reads.install(); import tensorflow, keras; "
        "from launcher.record.probe import usage; "
        "usage.gather(usage.Observed(reads.opened), '/nonexistent-run', '/tmp')"
    ),
}


def wall(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=tree_env())
    return time.perf_counter() - start


def main() -> None:
    samples: dict[str, list[float]] = {name: [] for name in PROGRAMS}
    for _ in range(N):  # interleaved, so drift on a noisy machine hits all alike
        for name, code in PROGRAMS.items():
            samples[name].append(wall(code))
    med = {name: statistics.median(values) for name, values in samples.items()}
    base = med["interpreter start (baseline)"]
    print(f"fingerprint benchmark, {N} interleaved repetitions, medians (seconds)")
    for name, value in med.items():
        print(f"  {name:<34} {value:7.3f}   above baseline {value - base:7.3f}")
    hook = med["job: the same under the open hook"] - med["job: import tensorflow, keras"]
    used = med["job: the same, then what it used"] - med["job: the same under the open hook"]
    print(f"  the open hook during imports: {hook:.3f} s; gathering what the job used: {used:.3f} s")
    added = (med["launcher side: collect()"] - base) + (med["job side: software()"] - base) + hook + used
    print(f"fingerprint added to a launch: {added:.3f} s (target < 0.5 s): {'OK' if added < 0.5 else 'OVER'}")
    tf_cost = med["job process: import tensorflow"] - base
    print(f"ratio fingerprint / import tensorflow: {added / tf_cost:.3f}")


if __name__ == "__main__":
    main()
