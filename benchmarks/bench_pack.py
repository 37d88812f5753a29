"""What sharing a run costs (issue 41; targets: `launch pack` and `launch unpack` of the mnist run under
1 s each without --with-env; `launch replay FILE` adds under 2 s to the replay of the same run from its
store), and how large an archive is with and without --with-env.

One real mnist run (the packaged sample, one epoch) is made first. Then, interleaved over N
repetitions, whole commands as a user types them (a fresh interpreter each: cold imports count):
`launch pack RUN` (gzip, and zstd where the zstandard package is installed), `launch unpack FILE`
into a fresh store, `launch replay RUN` in a copy of the run's store and `launch replay FILE` into a
fresh store. Last, one `launch pack RUN --with-env` (its wheels from pip's cache or the index). Prints
medians side by side, the difference replay FILE makes, and the sizes.

    python benchmarks/bench_pack.py [N]
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from common import REPO, launch, timed

sys.path.insert(0, str(REPO))

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-pack-"))
    store = root / "store"
    launch(store, "train.epochs=1")
    (run,) = [p for p in store.iterdir() if p.is_dir() and p.name[:8].isdigit()]
    cli = [sys.executable, "-m", "launcher"]
    try:
        import zstandard  # noqa: F401

        kinds = ["gzip", "zstd"]
    except ImportError:
        kinds = ["gzip"]
    samples: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    for n in range(N):  # interleaved: drift on a noisy machine hits every command alike
        for kind in kinds:
            out = root / f"run-{n}.{kind}.tar.{'gz' if kind == 'gzip' else 'zst'}"
            seconds, _ = timed([*cli, "pack", str(run), "-o", str(out)])
            samples.setdefault(f"pack ({kind})", []).append(seconds)
            sizes[f"without --with-env ({kind})"] = out.stat().st_size
            seconds, _ = timed([*cli, "unpack", str(out), "--store", str(root / f"unpacked-{n}-{kind}")])
            samples.setdefault(f"unpack ({kind})", []).append(seconds)
        copy = root / f"copy-{n}"
        shutil.copytree(store, copy, symlinks=True)
        seconds, stdout = timed([*cli, "replay", str(copy / run.name)])
        assert "REPRODUCED" in stdout, stdout[-2000:]
        samples.setdefault("replay RUN (from its store)", []).append(seconds)
        archive = root / f"run-{n}.gzip.tar.gz"
        seconds, stdout = timed([*cli, "replay", str(archive), f"store.root={root / f'fresh-{n}'}"])
        assert "REPRODUCED" in stdout, stdout[-2000:]
        samples.setdefault("replay FILE (imported first)", []).append(seconds)
    env_archive = root / "run-env.tar.gz"
    seconds, _ = timed([*cli, "pack", str(run), "--with-env", "-o", str(env_archive)])
    sizes["with --with-env (gzip)"] = env_archive.stat().st_size
    med = {name: statistics.median(values) for name, values in samples.items()}
    print(f"pack benchmark: the mnist run ({run.name}), {N} interleaved repetitions, medians (seconds)")
    for name, value in med.items():
        target = " (target < 1 s)" if name.startswith(("pack", "unpack")) else ""
        print(f"  {name:<32} {value:7.3f}{target}")
    added = med["replay FILE (imported first)"] - med["replay RUN (from its store)"]
    ratio = med["replay FILE (imported first)"] / med["replay RUN (from its store)"]
    print(f"  replay FILE adds {added:.3f} s to replay RUN (ratio {ratio:.3f}; target < 2 s)")
    print(f"  pack --with-env (once, wheels from pip's cache or the index): {seconds:.1f} s")
    for name, size in sizes.items():
        print(f"  archive {name:<28} {size / (1 << 20):9.2f} MiB")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
