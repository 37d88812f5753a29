"""Time to decide "the image exists, reuse it" for runtime=docker (target: under 1 s).

What a launch pays before its container starts when the image is already built:
read the template and lockfile, hash the launcher source, ask the daemon for the
base's digest and for the content tag. Measured two ways, N times each, medians:
1. in a fresh process (`python -c`): includes importing the Docker SDK and connecting,
   which is what every `launch ... runtime=docker` pays;
2. in one warm process, repeated: the decision alone.

Needs a daemon and the image built (`launch image build image=tf-cpu image.base=local`).

    python benchmarks/bench_image_cache.py [N] [OVERRIDES...]
"""

from __future__ import annotations

import logging
import statistics
import subprocess
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
OVERRIDES = sys.argv[2:] or ["image=tf-cpu", "image.base=local"]

DECIDE = """
import sys, time
t0 = time.perf_counter()
from omegaconf import OmegaConf
from launcher.docker import images
from launcher.docker import imagebuild
from launcher.run.composition import compose
spec = images.spec_from_config(OmegaConf.to_container(compose(sys.argv[1:]).image, resolve=True))
t1 = time.perf_counter()
info = imagebuild.ensure_image(spec)  # its notes: nowhere (no handler set up in this process)
t2 = time.perf_counter()
assert not info.built, "the image was built: run the benchmark again to time reuse"
print(f"{t1 - t0:.4f} {t2 - t1:.4f}")
"""


def main() -> None:
    from omegaconf import OmegaConf

    from launcher import console
    from launcher.docker import imagebuild, images
    from launcher.run.composition import compose

    spec = images.spec_from_config(OmegaConf.to_container(compose(OVERRIDES).image, resolve=True))
    console.setup()  # the build's progress on stderr, as `launch image build` shows it
    imagebuild.ensure_image(spec)  # build once if needed: we time reuse only
    console.setup(logging.WARNING)  # the timed calls say nothing
    config_s, fresh_s, wall_s = [], [], []
    for _ in range(N):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", DECIDE, *OVERRIDES], check=True, capture_output=True, text=True
        ).stdout.split()
        wall_s.append(time.perf_counter() - start)
        config_s.append(float(out[0]))
        fresh_s.append(float(out[1]))
    warm_s = []
    from launcher.docker import containers

    cli = containers.client()
    for _ in range(N):
        start = time.perf_counter()
        info = imagebuild.ensure_image(spec, cli=cli)
        warm_s.append(time.perf_counter() - start)
    assert not info.built
    print(f"image cache benchmark: {info.ref}, {N} runs each, medians")
    print(
        f"  fresh process: decide reuse {statistics.median(fresh_s):.3f} s "
        f"(+ config composition {statistics.median(config_s):.3f} s; "
        f"whole `python -c` {statistics.median(wall_s):.3f} s)"
    )
    print(f"  warm process:  decide reuse {statistics.median(warm_s):.3f} s")
    verdict = "met" if statistics.median(fresh_s) < 1.0 else "MISSED"
    print(f"  target < 1 s for the decision in a fresh process: {verdict}")


if __name__ == "__main__":
    main()
