"""Images, lockfiles and container arguments as data: no Docker, no network.

Rendered Dockerfiles and container run arguments are compared with recorded files
under ``golden/``; a mismatch shows a unified diff. Regenerate them after an
intended change with ``LAUNCH_UPDATE_GOLDEN=1 pytest tests/unit/test_images.py``.
"""

from __future__ import annotations

import difflib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.docker import container_spec, imagebuild, images, treehash
from launcher.errors import ConfigError, DockerUnavailable, ImageError, LockfileError

GOLDEN = Path(__file__).parent / "golden"
ROOT = images.LAUNCH_ROOT
CONFIGS = ROOT / "launcher" / "configs"
HASH_A = "sha256:" + "a" * 64
HASH_B = "sha256:" + "b" * 64
PINNED = "python:3.11-slim-bookworm@sha256:" + "c" * 64


def check_golden(name: str, actual: str) -> None:
    """Compare with golden/<name>; show a readable diff; rewrite with LAUNCH_UPDATE_GOLDEN=1."""
    path = GOLDEN / name
    if os.environ.get("LAUNCH_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual)
    expected = path.read_text() if path.exists() else ""
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(expected.splitlines(True), actual.splitlines(True), f"golden/{name}", "rendered")
        )
        pytest.fail(f"{name} differs from its golden file (LAUNCH_UPDATE_GOLDEN=1 to accept):\n{diff}")


def spec_of(config: str, **overrides) -> images.ImageSpec:
    data = OmegaConf.to_container(OmegaConf.load(CONFIGS / "image" / f"{config}.yaml"))
    data.update(overrides)
    return images.spec_from_config(data)


@pytest.fixture
def weird_dir(tmp_path: Path) -> Path:
    """A directory whose name has spaces, quotes, a dollar sign and a newline."""
    path = tmp_path / "we ird 'q' \"dq\" $HOME\nline"
    path.mkdir()
    return path


# ---------------------------------------------------------------- configs and templates
@pytest.mark.parametrize("name", ["tf-cpu", "tf-gpu"])
def test_image_config_resolves_to_existing_files(name):
    spec = spec_of(name)
    assert spec.name == name
    assert spec.template.is_file() and spec.lockfile.is_file() and spec.requirements.is_file()
    assert spec.gpus is (name == "tf-gpu")
    assert images.parse_base(spec.base)[1] is not None  # the default base is pinned


@pytest.mark.parametrize("name", ["tf-cpu", "tf-gpu"])
def test_rendered_dockerfile_matches_golden(name):
    spec = spec_of(name, base="local")
    base_ref, _ = images.parse_base(spec.base)
    rendered = images.render_dockerfile(spec.template.read_text(), images.dockerfile_values(spec, base_ref))
    assert "{{" not in rendered
    check_golden(f"{name}.Dockerfile", rendered)


def test_rendered_dockerfile_properties():
    """The security and reproducibility properties the docs promise, checked in the text."""
    text = images.render_dockerfile(spec_of("tf-cpu").template.read_text(), {"base": "B", "name": "tf-cpu"})
    final = text.split("\nFROM B\n", 1)[1]
    assert "--require-hashes" in text and "--no-deps" in text and "--no-index" in text
    assert "--no-compile" in text and "unchecked-hash" in text and "PYTHONDONTWRITEBYTECODE=1" in text
    assert "wheels" not in final.replace("COPY --from=builder /opt/launch/venv /opt/launch/venv", "")
    assert "USER 1000:1000" in final
    assert 'ENTRYPOINT ["/opt/launch/venv/bin/python", "-P", "-m", "launcher.bootstrap"]' in final
    assert "ca" not in " ".join(line for line in text.splitlines() if line.startswith("COPY"))


def test_render_refuses_unknown_placeholder():
    with pytest.raises(ImageError, match="unknown placeholder.*cuda"):
        images.render_dockerfile("FROM {{ base }}\nRUN {{ cuda }}\n", {"base": "x"})


def test_missing_template_is_an_image_error(tmp_path):
    spec = spec_of("tf-cpu", base=PINNED, template=str(tmp_path / "nope.template"))
    with pytest.raises(ImageError, match="image.template .*cannot be read"):
        imagebuild.read_inputs(spec, cli=None)


def test_spec_rejects_bad_fields(tmp_path):
    with pytest.raises(ImageError, match="image.name"):
        spec_of("tf-cpu", name="TF CPU")
    with pytest.raises(ImageError, match="ca_bundle"):
        spec_of("tf-cpu", ca_bundle=str(tmp_path / "missing.pem"))
    with pytest.raises(ImageError, match="allow_unpinned must be true or false"):
        spec_of("tf-cpu", allow_unpinned="yes")


# ---------------------------------------------------------------- base image
def test_base_local_and_pinned():
    assert images.parse_base("local") == (images.LOCAL_BASE, None)
    assert images.parse_base(PINNED) == (PINNED, "sha256:" + "c" * 64)


def test_unpinned_base_is_refused_unless_allowed():
    with pytest.raises(ImageError, match="not pinned by digest.*allow_unpinned=true"):
        images.parse_base("python:3.11-slim-bookworm")
    with pytest.raises(ImageError, match="not pinned"):
        spec_of("tf-cpu", base="debian:bookworm")
    assert images.parse_base("debian:bookworm", allow_unpinned=True) == ("debian:bookworm", None)


# ---------------------------------------------------------------- lockfiles
@pytest.mark.parametrize("name", ["tf-cpu", "tf-gpu"])
def test_committed_lockfiles_are_fully_hashed(name):
    text = (ROOT / "lockfiles" / f"{name}.txt").read_text()
    entries = {e.name: e for e in images.parse_lockfile(text, name)}
    assert all(e.sha256s for e in entries.values())
    for required in ("numpy", "hydra-core", "omegaconf", "filelock", "pip", "setuptools", "wheel"):
        assert required in entries, required
    if name == "tf-cpu":
        assert entries["tensorflow-cpu"].version == "2.21.0"
    else:
        assert entries["tensorflow"].version == "2.21.0"
        assert any(n.startswith("nvidia-cudnn") for n in entries)


def test_lockfile_continuations_and_comments():
    text = f"""# header
foo==1.0 \\
    --hash={HASH_A} \\
    --hash={HASH_B}
    # via bar
Bar_Baz[extra]==2.0 ; python_version >= "3" \\
    --hash={HASH_A}
"""
    foo, bar = images.parse_lockfile(text)
    assert (foo.name, foo.version, foo.hashes) == ("foo", "1.0", (HASH_A, HASH_B))
    assert (bar.name, bar.version) == ("bar-baz", "2.0")
    assert bar.sha256s == {"a" * 64}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("foo==1.0\n", "foo has no sha256 --hash"),
        (f"foo>=1.0 --hash={HASH_A}\n", "not pinned as name==version"),
        ("foo==1.0 --hash=md5:abc\n", "foo has no sha256"),
        (f"--index-url https://x\nfoo==1 --hash={HASH_A}\n", "option line '--index-url'"),
        ("# only comments\n", "lists no requirements"),
    ],
)
def test_bad_lockfiles_are_refused(text, match):
    with pytest.raises(LockfileError, match=match):
        images.parse_lockfile(text, "x.txt")


def test_installer_requirements_keep_hashes_and_need_pip():
    entries = images.parse_lockfile(f"wheel==1 --hash={HASH_A}\nnumpy==2 --hash={HASH_A}\npip==26 --hash={HASH_B}\n")
    tools = images.installer_requirements(entries)
    assert tools == f"pip==26 \\\n    --hash={HASH_B}\nwheel==1 \\\n    --hash={HASH_A}\n"
    assert [e.name for e in images.parse_lockfile(tools)] == ["pip", "wheel"]
    with pytest.raises(LockfileError, match="pins no pip"):
        images.installer_requirements(images.parse_lockfile(f"numpy==2 --hash={HASH_A}\n"))


def test_select_wheels_by_hash():
    entries = images.parse_lockfile(f"foo==1 --hash={HASH_A}\nbar==2 --hash={HASH_B}\n")
    available = {"foo-1-py3-none-any.whl": "a" * 64, "foo-0.9.whl": "f" * 64}
    chosen, missing = images.select_wheels(entries, available)
    assert chosen == {"foo-1-py3-none-any.whl": "a" * 64}
    assert missing == ["bar==2"]


# ---------------------------------------------------------------- tags and commands
def test_content_tag_depends_on_every_input():
    base = images.content_tag("D", "L", "sha256:x", "0.1.0+src.1")
    assert base == images.content_tag("D", "L", "sha256:x", "0.1.0+src.1")
    others = {
        images.content_tag("D2", "L", "sha256:x", "0.1.0+src.1"),
        images.content_tag("D", "L2", "sha256:x", "0.1.0+src.1"),
        images.content_tag("D", "L", "sha256:y", "0.1.0+src.1"),
        images.content_tag("D", "L", "sha256:x", "0.1.0+src.2"),
        images.content_tag("DL", "", "sha256:x", "0.1.0+src.1"),  # no ambiguity at boundaries
    }
    assert base not in others and len(others) == 5
    assert images.image_ref("tf-cpu", base) == f"launch/tf-cpu:{base[:24]}"


def test_source_version_ignores_caches(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"junk")
    files = images.source_files(tmp_path)
    assert [rel for rel, _ in files] == ["a.py"]
    before = images.source_version("0.1.0", files)
    (tmp_path / "a.py").write_text("x = 2\n")
    assert images.source_version("0.1.0", files) != before


def test_pip_download_argv_targets_the_image_not_the_host():
    argv = images.pip_download_argv("/usr/bin/python3", Path("/l dir/lock.txt"), Path("/w h"), "/etc/ca b.pem", None)
    check_golden("pip-download.argv.json", json.dumps(argv, indent=1) + "\n")
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert "--require-hashes" in argv and "--no-deps" in argv
    assert argv[-2:] == ["--requirement", "/l dir/lock.txt"]


def test_pip_compile_argv_generates_hashes():
    argv = images.pip_compile_argv("py", Path("a.in"), Path("a.txt"), None, None)
    assert "--generate-hashes" in argv and "--allow-unsafe" in argv
    assert argv[argv.index("--index-url") + 1] == "https://pypi.org/simple"


# ---------------------------------------------------------------- build context
def test_build_context_is_deterministic_and_minimal(tmp_path):
    wheel = tmp_path / "foo-1-py3-none-any.whl"
    wheel.write_bytes(b"wheel bytes")
    lock = f"pip==26 --hash={HASH_B}\nfoo==1 --hash={HASH_A}\n"
    inputs = imagebuild.BuildInputs(
        "tf-cpu", "FROM x\n", lock, "local", "x", "sha256:1", "v", images.parse_lockfile(lock)
    )
    blobs = []
    for _ in range(2):
        out = io.BytesIO()
        imagebuild.write_context(out, inputs, {wheel.name: wheel})
        blobs.append(out.getvalue())
    assert blobs[0] == blobs[1]
    with tarfile.open(fileobj=io.BytesIO(blobs[0])) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names[:3] == ["Dockerfile", "lockfile.txt", "tools.txt"]
    assert "wheels/foo-1-py3-none-any.whl" in names and "launcher/bootstrap.py" in names
    assert not any("__pycache__" in n for n in names)
    assert {(m.mtime, m.uid, m.gid, m.mode) for m in members} == {(0, 0, 0, 0o644)}


# ---------------------------------------------------------------- container arguments
def test_run_args_golden_with_hostile_paths():
    run_dir = "/store/run store 'x'/20260101-000000-abcdef"
    cwd = '/home/u/my "proj"\n$x'
    mounts = container_spec.job_mounts(run_dir, cwd, ["data/mnist.npz", "/data/sets/mnist dir"])
    env = container_spec.container_env(
        {
            "PYTHONHASHSEED": "1",
            "TF_DETERMINISTIC_OPS": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "AWS_SECRET_ACCESS_KEY": "s",
            "TF_VAR_db_password": "p",
            "HOME": "/root",
            "PATH": "/usr/bin",
            "PYTHONPATH": "/work/main",
            "LAUNCH_EXTRA": "1",
            "GITHUB_TOKEN": "t",
        }
    )
    args = container_spec.run_args(
        "sha256:" + "d" * 64,
        run_dir,
        cwd,
        (1000, 1000),
        env,
        mounts,
        container_spec.job_labels(run_dir, 4242, "host-1"),
        cpus={3, 1},
    )
    check_golden("run-args.json", json.dumps(args, indent=1, sort_keys=True) + "\n")


def test_container_env_is_an_allowlist():
    env = container_spec.container_env(
        {
            "TF_ENABLE_ONEDNN_OPTS": "0",
            "PYTHONHASHSEED": "3",
            "LAUNCH_X": "y",
            "OPENAI_API_KEY": "k",
            "TF_TOKEN_app": "t",
            "HOME": "/root",
            "SSH_AUTH_SOCK": "/s",
        }
    )
    assert env == {"LAUNCH_X": "y", "PYTHONHASHSEED": "3", "TF_ENABLE_ONEDNN_OPTS": "0"}


def test_network_is_none_and_only_run_dir_writable():
    mounts = container_spec.job_mounts("/s/run", "/p", ["/d/x.npz"])
    args = container_spec.run_args("img", "/s/run", "/p", (1000, 1000), {}, mounts, {})
    assert args["network_mode"] == "none" and args["read_only"] is True
    writable = [m["target"] for m in args["mounts"] if not m["read_only"]]
    assert writable == ["/s/run"]
    assert "device_requests" not in args


def test_mounts_skip_paths_inside_mounted_dirs_and_order_parents_first():
    mounts = container_spec.job_mounts("/p/runs/r1", "/p", ["data/x.npz", "/p/runs/r1/in", "/d"])
    assert [(m.target, m.read_only) for m in mounts] == [("/d", True), ("/p", True), ("/p/runs/r1", False)]


@pytest.mark.parametrize("cwd", ["/", "/usr", "/opt/launch"])
def test_system_directories_are_never_mounted(cwd):
    with pytest.raises(ConfigError, match="would hide the image's own files"):
        container_spec.job_mounts("/s/run", cwd)


def test_input_paths_from_config(tmp_path, weird_dir):
    data = weird_dir / "m.npz"
    data.write_bytes(b"x")
    script = weird_dir / "train.py"
    script.write_text("")
    cfg = {"train": {"name": "mnist", "data": str(data)}}
    assert container_spec.input_paths(cfg, str(tmp_path)) == [str(data)]
    assert container_spec.input_paths({"train": {"name": "mnist", "data": "sample"}}, "/") == []
    cfg = {"train": {"name": "script", "script": str(script)}}
    assert container_spec.input_paths(cfg, str(tmp_path)) == [str(weird_dir)]
    cfg = {"train": {"name": "custom", "path": weird_dir.name, "data": "sample"}}
    assert container_spec.input_paths(cfg, str(weird_dir.parent)) == [str(weird_dir)]


def test_user_and_exit_codes():
    assert container_spec.container_user(0, 0) == (1000, 1000)
    assert container_spec.container_user(1234, 99) == (1234, 99)
    assert container_spec.exit_code(0) == 0
    assert container_spec.exit_code(1) == 1
    assert container_spec.exit_code(130) == -2
    assert container_spec.exit_code(137) == -9
    assert container_spec.exit_code(137, oom_killed=True) == 137


def test_launch_from_host_tmp_moves_the_scratch_space():
    mounts = container_spec.job_mounts("/tmp/store/run", "/tmp")
    assert [(m.target, m.read_only) for m in mounts] == [("/tmp", True), ("/tmp/store/run", False)]
    args = container_spec.run_args("img", "/tmp/store/run", "/tmp", (1, 1), {}, mounts, {})
    assert args["tmpfs"] == {"/var/tmp": "rw,nosuid,nodev,size=1024m"}
    assert args["environment"] == {"TMPDIR": "/var/tmp"}


def test_gpu_request():
    args = container_spec.run_args("img", "/r", "/c", (1, 1), {}, [], {}, gpus=True)
    assert args["device_requests"] == [{"count": -1, "capabilities": [["gpu"]]}]


# ---------------------------------------------------------------- tree hash, daemon
def test_tree_hash_ignores_times_but_not_content_mode_or_links(weird_dir):
    (weird_dir / "pkg").mkdir()
    f = weird_dir / "pkg" / "m.py"
    f.write_text("x = 1\n")
    (weird_dir / "link").symlink_to("pkg/m.py")
    first = treehash.tree_sha256(str(weird_dir))
    os.utime(f, (1, 1))
    assert treehash.tree_sha256(str(weird_dir)) == first
    f.chmod(0o600)
    assert treehash.tree_sha256(str(weird_dir)) != first
    f.chmod(0o644)
    f.write_text("x = 2\n")
    second = treehash.tree_sha256(str(weird_dir))
    assert second != first
    (weird_dir / "link").unlink()
    (weird_dir / "link").symlink_to("pkg")
    assert treehash.tree_sha256(str(weird_dir)) != second


def test_no_daemon_is_one_line_with_next_step(monkeypatch, tmp_path):
    from launcher.docker import containers

    url = f"unix://{tmp_path}/no.sock"
    monkeypatch.setenv("DOCKER_HOST", url)
    with pytest.raises(DockerUnavailable) as info:
        containers.client(timeout=5)
    assert str(info.value) == (f"no Docker daemon answers at {url}: start one (dockerd) or use runtime=local")


def test_subcommands_register():
    from launcher.cli import main as cli

    assert "image" in cli.COMMANDS and "lock" not in cli.COMMANDS  # lock is an action of image now
    assert cli.RENAMED["lock"] == ("image", "lock")
    with pytest.raises(ConfigError, match="invalid choice"):
        cli.command("image")(["frobnicate"])


@pytest.mark.parametrize("words", [["image", "lock"], ["lock"]], ids=["image lock", "old lock"])
def test_image_lock_pins_the_image_named_and_the_old_lock_still_works_with_a_note(monkeypatch, capsys, words):
    """``launch image lock image=NAME [--host]``; ``launch lock ...``, its old spelling, works one more
    release and says its new name on stderr in one line."""
    from launcher.cli import main as cli
    from launcher.docker import baseimage

    locked = []
    monkeypatch.setattr(baseimage, "lock", lambda spec, on_host=False: locked.append((spec.name, on_host)))
    assert cli.main([*words, "image=tf-gpu", "--host"]) == 0
    assert locked == [("tf-gpu", True)]
    err = capsys.readouterr().err
    if words == ["lock"]:
        assert err == "[launch] note: lock is now image lock (the old spelling goes in the next release)\n"
    else:
        assert err == ""
