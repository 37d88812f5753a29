"""The GPU image on any machine: build tf-gpu, run a strict job on the CPU in it, compare.

    python benchmarks/gpu_image.py [--rebuild] [--base local] [--store DIR]
    nox -s gpu_image

Builds (or reuses) ``launch/tf-gpu`` with ``launch image build image=tf-gpu`` and times
it, then runs the same strict one-epoch job (``train.data=sample``, seed 0) three ways:
in the tf-gpu image on the CPU (``image.gpus=false``), in the tf-cpu image, and
locally. ``launch compare`` must REFUSE the two image runs (exit 3): they are
different software (another image, another installed tree), so the comparability
key will not vouch for a bitwise comparison. The weights' hashes are then compared
directly, which is what this check is about: do the ``tensorflow`` (CUDA) and
``tensorflow-cpu`` wheels compute the same bits on this CPU?

Not in every CI run: a first build downloads about 3.2 GB of CUDA wheels and needs
about 25 GB of free disk (image, builder stage, wheel cache). Exit codes: 0 every
check passed; 1 a check failed; 2 bad usage or no Docker daemon.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.gpu_acceptance import Launcher, Row, render, software, weights  # noqa: E402

JOB = ("train=mnist", "train.data=sample", "train.epochs=1", "determinism=strict", "+seed=0")
NEEDS_GB = 25  # a first build: 6.8 GB image, ~10 GB builder stage, 3.5 GB wheel cache, margin


def image_ref(output: str) -> str | None:
    """The image reference ``launch image build`` prints last."""
    refs = [line.strip() for line in output.splitlines() if line.strip().startswith("launch/")]
    return refs[-1] if refs else None


def run_row(name: str, run: Path, wall: float, sw: dict, digest: str | None) -> Row:
    """What one run was: its weights, its TensorFlow build, the GPUs it saw, its image's tree."""
    build = (sw.get("tf_build") or {}).get("is_cuda_build")
    tree = (sw.get("container") or {}).get("packages_sha256")
    where = f", installed tree {str(tree)[:12]}" if tree else ""
    return Row(
        name,
        "INFO",
        f"{run.name}, {wall:.0f} s: weights {digest}; TensorFlow {sw.get('tensorflow')}, "
        f"CUDA build {build}, {len(sw.get('tf_gpus') or [])} GPU(s) seen{where}",
    )


def verdict_rows(gpu_sw: dict, digests: dict[str, str | None], compare_rc: int, compare_out: str) -> list[Row]:
    """The checks: tf-gpu is the CUDA build yet ran on the CPU; the key refuses; the bits agree."""
    cuda = str((gpu_sw.get("tf_build") or {}).get("is_cuda_build")) == "True"
    on_cpu = not gpu_sw.get("tf_gpus")
    rows = [
        Row(
            "tf-gpu: CUDA build, on the CPU",
            "PASS" if cuda and on_cpu else "FAIL",
            f"is_cuda_build={cuda}, GPUs seen: {len(gpu_sw.get('tf_gpus') or [])}",
        )
    ]
    lines = compare_out.strip().splitlines() or ["(no output)"]
    # The differing key fields, by group (software.tf_build.cuda_version -> software.tf_build).
    fields = dict.fromkeys(
        ".".join(line.split()[0].split(".")[:2]) for line in lines[2:] if line.startswith("  ") and line.split()
    )
    rows.append(
        Row(
            "launch compare: REFUSED",
            "PASS" if compare_rc == 3 else "FAIL",
            f"exit {compare_rc}, differing key fields: {', '.join(fields) or '-'}; "
            "so the weights' hashes are compared directly",
        )
    )
    gpu = digests["tf-gpu"]
    for other in ("tf-cpu", "local"):
        same = gpu is not None and gpu == digests[other]
        rows.append(
            Row(
                f"weights: tf-gpu == {other}",
                "PASS" if same else "FAIL",
                f"{gpu} {'==' if same else '!='} {digests[other]}",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rebuild", action="store_true", help="build tf-gpu with no Docker cache (times a full build)")
    p.add_argument("--base", default="local", help="image.base (default local: launch image bootstrap-base)")
    p.add_argument("--store", type=Path, help="keep the runs in this store (default: a temporary one)")
    args = p.parse_args(argv)

    from launcher.docker import containers
    from launcher.errors import LauncherError

    try:
        cli = containers.client(timeout=3600)
    except LauncherError as exc:
        print(f"gpu_image: {exc}", file=sys.stderr)
        return 2
    docker_root = containers.daemon_info(cli).get("DockerRootDir") or "/"
    free = shutil.disk_usage(docker_root if Path(docker_root).exists() else "/").free / 1e9
    print(f"gpu_image: {free:.1f} GB free under {docker_root} (a first build needs about {NEEDS_GB})", flush=True)
    lx = Launcher(args.store)
    base = f"image.base={args.base}"

    print("gpu_image: launch image build image=tf-gpu (minutes when it is not there yet)", flush=True)
    start = time.perf_counter()
    rc, out, _ = lx.call("image", "build", *(["--rebuild"] if args.rebuild else []), "image=tf-gpu", base)
    build_s, ref = time.perf_counter() - start, image_ref(out)
    if rc != 0 or ref is None:
        print(render([Row("build tf-gpu", "FAIL", f"exit {rc}: {out.strip()[-400:]}")], ()))
        return 1
    size = (containers.find_image(cli, ref) or {}).get("Size", 0) / 1e9
    how = "reused" if "reused, not built" in out else "built"
    rows = [Row("build tf-gpu", "INFO", f"{ref}: {how} in {build_s:.0f} s; {size:.2f} GB")]
    rc, out, _ = lx.call("image", "build", "image=tf-cpu", base)
    if rc != 0:
        print(render([*rows, Row("build tf-cpu", "FAIL", f"exit {rc}: {out.strip()[-400:]}")], ()))
        return 1

    ways = {
        "tf-gpu": ("runtime=docker", "image=tf-gpu", base, "image.gpus=false"),
        "tf-cpu": ("runtime=docker", "image=tf-cpu", base),
        "local": (),
    }
    runs = {}
    for name, extra in ways.items():
        run, wall, out = lx.run(*JOB, *extra)
        if run is None:
            print(render([*rows, Row(name, "FAIL", f"the run did not complete: {out.strip()[-400:]}")], ()))
            return 1
        runs[name] = run
        rows.append(run_row(name, run, wall, software(run), weights(run)))
    rc, out = lx.compare(runs["tf-gpu"], runs["tf-cpu"])
    rows += verdict_rows(software(runs["tf-gpu"]), {k: weights(v) for k, v in runs.items()}, rc, out)
    print(f"runs in {lx.store}")
    print(render(rows, ()))
    return 1 if any(r.verdict == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
