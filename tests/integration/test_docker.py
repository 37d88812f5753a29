"""runtime=docker against a real Docker daemon (issue: pinned Docker images).

Needs a daemon, the local base image and (for speed) the tf-cpu image, which
``.ci/docker-setup.sh`` provides; a missing image is built by the first run. Without a
daemon these tests are skipped, unless LAUNCH_REQUIRE_DOCKER=1 (CI) makes that a failure.
Every container and image a test creates is removed by the test; the images that
setup built are kept for the next run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import QUICK, REPO, is_run, q, run_launch

pytestmark = pytest.mark.docker

DOCKER = ("runtime=docker", "image.base=local")
STRICT = ("determinism=strict",)
MNIST = ("train=mnist", "train.data=mnist small.npz", *QUICK)


@pytest.fixture(scope="module", autouse=True)
def daemon():
    """A client of the daemon, or a skip (a failure under LAUNCH_REQUIRE_DOCKER=1)."""
    from launcher.docker import containers
    from launcher.errors import DockerUnavailable

    try:
        cli = containers.client(timeout=600)
    except DockerUnavailable as exc:
        if os.environ.get("LAUNCH_REQUIRE_DOCKER"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    return cli


@pytest.fixture(scope="module")
def base_image():
    """`launch image bootstrap-base`, which reuses the base when it exists."""
    done = run_launch("image", "bootstrap-base", timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A user's project directory with a hostile name, holding the data and a script."""
    path = tmp_path_factory.mktemp("docker") / "my proj 'q' $x"
    path.mkdir()
    shutil.copy(REPO / "tests" / "data" / "mnist-small" / "mnist-small.npz", path / "mnist small.npz")
    return path


@pytest.fixture(scope="module")
def docker_store(project) -> Path:
    store = project.parent / "run store 'x'"
    store.mkdir()
    return store


def _new_run(store: Path, before: set[Path]) -> Path:
    (run,) = [p for p in set(store.iterdir()) - before if is_run(p)]
    return run


def _launch_run(store: Path, cwd: Path, *overrides: str, env: dict | None = None):
    before = set(store.iterdir())
    done = run_launch(
        *STRICT,
        f"store.root={q(store)}",
        *overrides,
        cwd=cwd,
        env=env,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return _new_run(store, before), done


@pytest.fixture(scope="module")
def docker_pair(base_image, project, docker_store):
    """Two identical strict Docker runs; the first may build the image."""
    first = _launch_run(docker_store, project, *MNIST, *DOCKER)
    second = _launch_run(docker_store, project, *MNIST, *DOCKER)
    return first, second


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.slow
def test_two_strict_docker_runs_give_identical_weights(docker_pair):
    (a, _), (b, _) = docker_pair
    wa = _json(a / "result.json")["weights_sha256"]
    assert wa and wa == _json(b / "result.json")["weights_sha256"]
    assert _json(a / "status.json")["state"] == "complete"


@pytest.mark.slow
def test_an_unmodified_script_is_observed_in_a_container(base_image, project, docker_store):
    """The keras-io style script, its data named by an argument (mounted read-only), twice."""
    script = REPO / "tests" / "integration" / "scripts" / "keras_fit.py"
    args = ("train=script", f"train.script={q(script)}", f"train.args=[{q(project / 'mnist small.npz')},1]")
    (a, _), (b, _) = (_launch_run(docker_store, project, *args, *DOCKER) for _ in range(2))
    ra = _json(a / "result.json")
    assert ra["weights_sha256"] and ra["weights_sha256"] == _json(b / "result.json")["weights_sha256"]
    assert ra["observed"]["models"] == ["sequential"] and (a / "metrics.jsonl").read_text().count("\n") == 1
    fp = _json(a / "fingerprint.json")
    assert list(fp["data"].values()) == [
        __import__("hashlib").sha256((project / "mnist small.npz").read_bytes()).hexdigest()
    ]
    done = run_launch("compare", a, b)
    assert done.returncode == 0 and done.stdout.startswith("IDENTICAL: weights, 1 epoch's metrics"), done.stdout


@pytest.mark.slow
def test_fingerprint_records_the_container(docker_pair, daemon):
    from launcher.docker import containers, images

    (a, _), (b, _) = docker_pair
    container = _json(a / "fingerprint.json")["software"]["container"]
    assert container["image_id"].startswith("sha256:")
    assert container["uid"] != 0 and container["network"] == "none"
    assert container["base"] == "local" and container["base_digest"].startswith("sha256:")
    assert container == _json(b / "fingerprint.json")["software"]["container"]
    labels = containers.labels_of(containers.find_image(daemon, container["image_id"]))
    assert labels["launch.packages_sha256"] == container["packages_sha256"]
    stored = (a / "image" / "lockfile.txt").read_text()
    assert images.sha256_text(stored) == container["lockfile_sha256"]
    assert (a / "image" / "Dockerfile").read_text().startswith("# The tf-cpu image")
    assert _json(a / "fingerprint.json")["software"]["os"]["id"] == "debian"
    owner = (a / "result.json").stat().st_uid
    assert owner == os.getuid()  # files written in the container are given back


@pytest.mark.slow
def test_second_launch_reuses_the_image(docker_pair):
    _, (_, second) = docker_pair
    assert "reused, not built" in second.stderr  # a note: on stderr
    assert "building image" not in second.stderr and "Step 1/" not in second.stdout + second.stderr


@pytest.mark.slow
def test_compare_docker_with_local_is_refused(docker_pair, project, docker_store, launch):
    (a, _), _ = docker_pair
    local, _ = _launch_run(docker_store, project, *MNIST, "runtime=local")
    done = launch("compare", a, local)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("REFUSED")
    assert "software.container" in done.stdout


@pytest.mark.slow
def test_ensure_image_for_run_checks_the_packages(docker_pair, tmp_path):
    from launcher.docker import runtime
    from launcher.errors import PackagesMismatch

    (a, _), _ = docker_pair
    recorded = _json(a / "container.json")
    assert runtime.ensure_image_for_run(a) == recorded["image_id"]
    # A copy whose image is gone and whose packages differ: the rebuild check refuses.
    copy = tmp_path / a.name
    shutil.copytree(a, copy)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    forged = {**recorded, "image_id": "sha256:" + "0" * 64, "packages_sha256": "f" * 64}
    (copy / "container.json").write_text(json.dumps(forged))
    with pytest.raises(PackagesMismatch, match="ffffffffffffffff"):
        runtime.ensure_image_for_run(copy)


@pytest.mark.slow
def test_replay_runs_in_the_runs_image(docker_pair, project, launch):
    (a, _), _ = docker_pair
    # The precheck compares this host's Python with the image's: --allow-mismatch.
    done = launch("replay", a, "--allow-mismatch", cwd=project, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"of run {a.name} exists; reused" in done.stderr
    assert "REPRODUCED" in done.stdout


SANDBOX_PROBE = r"""
import json, os, socket
from pathlib import Path

def attempt(fn):
    try:
        fn()
        return "allowed"
    except OSError as exc:
        return type(exc).__name__

report = {
    "uid": os.getuid(),
    "secret": os.environ.get("MY_SECRET_TOKEN"),
    "home_env": os.environ.get("HOME"),
    "seed_env": os.environ.get("PYTHONHASHSEED"),
    "cwd": os.getcwd(),
    "write_cwd": attempt(lambda: Path("probe.txt").write_text("x")),
    "write_image": attempt(lambda: Path("/opt/launch/probe").write_text("x")),
    "write_tmp": attempt(lambda: Path("/tmp/probe").write_text("x")),
    "network": attempt(lambda: socket.create_connection(("1.1.1.1", 53), timeout=3)),
    # Docker's own state, not the launcher's constants: the root mount's options and the interfaces.
    "root_mount": next(line.split()[3].split(",") for line in open("/proc/self/mounts") if line.split()[1] == "/"),
    "interfaces": sorted(os.listdir("/sys/class/net")),
}
Path(os.environ["LAUNCH_OUTPUT_DIR"], "report.json").write_text(json.dumps(report))
"""


@pytest.mark.slow
def test_job_is_sandboxed(base_image, project, docker_store):
    script = project / "probe 'it'.py"
    script.write_text(SANDBOX_PROBE)
    run, _ = _launch_run(
        docker_store,
        project,
        *DOCKER,
        "train=script",
        f"train.script={q(script)}",
        env={"MY_SECRET_TOKEN": "hunter2"},
    )
    report = _json(run / "outputs" / "report.json")
    assert report["uid"] == _json(run / "container.json")["uid"] != 0
    assert report["secret"] is None and report["home_env"] != os.environ.get("HOME")
    assert report["seed_env"] == "0"
    assert report["cwd"] == str(project)
    assert report["write_cwd"] != "allowed" and report["write_image"] != "allowed"
    assert report["write_tmp"] == "allowed"
    assert report["network"] != "allowed"
    assert not (project / "probe.txt").exists()
    # Read-only root and no network, as the kernel sees them (uid 1000 alone could not write /opt/launch,
    # and CI's daemon has no bridge: the two checks above would pass without the sandbox).
    assert "ro" in report["root_mount"] and "rw" not in report["root_mount"], report["root_mount"]
    assert report["interfaces"] == ["lo"], report["interfaces"]


SLEEPER = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


def _job_containers(daemon, run_name: str) -> list:
    return daemon.containers.list(all=True, filters={"label": f"launch.run={run_name}"})


def _start_sleeper(project: Path, store: Path) -> tuple[subprocess.Popen, Path]:
    script = project / "sleeper.py"
    script.write_text(SLEEPER)
    before = set(store.iterdir())
    argv = [
        sys.executable,
        "-m",
        "launcher",
        *STRICT,
        *DOCKER,
        "train=script",
        f"train.script={q(script)}",
        f"store.root={q(store)}",
    ]
    launcher = subprocess.Popen(
        argv,
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # the tree under test
    )
    for line in launcher.stdout:  # the job is running once the script says so
        if line.strip() == "ready":
            return launcher, _new_run(store, before)
    pytest.fail(f"the job never started (exit {launcher.wait()})")


@pytest.mark.slow
def test_ctrl_c_stops_the_container(base_image, project, docker_store, daemon):
    launcher, run = _start_sleeper(project, docker_store)
    (container,) = _job_containers(daemon, run.name)
    host = container.attrs["HostConfig"]  # what the daemon runs, not what the launcher records
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True, host
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    launcher.send_signal(signal.SIGINT)
    assert launcher.wait(timeout=60) == 130
    assert _job_containers(daemon, run.name) == []
    assert _json(run / "status.json")["state"] == "interrupted"


@pytest.mark.slow
def test_killed_launcher_leaves_no_container(base_image, project, docker_store, daemon):
    launcher, run = _start_sleeper(project, docker_store)
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 30
    while _job_containers(daemon, run.name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _job_containers(daemon, run.name) == []


@pytest.mark.slow  # a real Docker build (15 s), not training: kept out of the fast tier's 90 s
def test_failed_build_is_not_tagged(base_image, daemon, tmp_path):
    from launcher.docker import containers, imagebuild, images
    from launcher.errors import BuildFailed

    template = tmp_path / "Dockerfile.template"
    template.write_text("FROM {{ base }}\nRUN echo about to fail && false\n")
    spec = images.ImageSpec(
        name="launch-test-broken",
        template=template,
        lockfile=REPO / "lockfiles" / "tf-cpu.txt",
        requirements=REPO / "lockfiles" / "tf-cpu.in",
        base="local",
    )
    inputs = imagebuild.read_inputs(spec, daemon)
    with pytest.raises(BuildFailed) as info:
        imagebuild.ensure_image(spec, inputs=inputs, cli=daemon)
    assert info.value.step.startswith("Step 2/") and "RUN echo about to fail" in info.value.step
    assert "about to fail" in info.value.log_tail
    assert containers.find_image(daemon, inputs.ref) is None


def test_image_list_shows_the_base(base_image, launch):
    done = launch("image", "list")
    assert done.returncode == 0 and images_line(done.stdout, "launch-base:bookworm")


def images_line(text: str, ref: str) -> bool:
    return any(line.startswith(ref) for line in text.splitlines())
