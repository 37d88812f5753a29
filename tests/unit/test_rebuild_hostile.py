"""The rebuilt environment is read before its Python starts (issue 50): a ``.pth`` or any other file
that no wheel the rebuild installed lists, a file unlike its RECORD, compiled code shipped in a wheel,
a distribution it did not install: refused, after a build and on every reuse of a cached one."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from launcher.errors import RebuildError
from launcher.record.probe import distributions
from launcher.run import rebuild

SHARED = rebuild.pth_text(["/usr/lib/python3/site-packages"])


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def installed(site: Path, name: str, version: str, files: dict[str, bytes]) -> str:
    """``files`` installed in ``site`` as pip would (a dist-info with METADATA and RECORD); the files' identity."""
    info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/INSTALLER": b"pip\n",
    }
    for rel, content in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(content)
    lines = [(rel, _digest(content)) for rel, content in files.items()] + [(f"{info}/RECORD", "")]
    (site / info / "RECORD").write_text("".join(f"{rel},{d},\n" for rel, d in lines))
    return distributions.files_sha256(lines)


def overlay(tmp_path: Path, extra: dict[str, bytes] | None = None, recorded: bool = True) -> tuple[Path, rebuild.Plan]:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / rebuild.SHARED_PTH).write_text(SHARED)
    identity = installed(site, "toolz", "1.0", {"toolz/__init__.py": b"x = 1\n", **(extra or {})})
    used = {"toolz": {"version": "1.0", "files_sha256": identity}} if recorded else {}
    return site, rebuild.Plan(recorded={"toolz": "1.0"}, install=("toolz==1.0",), used=used)


def test_an_overlay_as_installed_passes(tmp_path):
    site, p = overlay(tmp_path)
    (site / "toolz" / "__pycache__").mkdir()
    (site / "toolz" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"written by an import")
    rebuild.check_overlay(site, p, SHARED)


def test_a_pth_runs_only_from_a_distribution_whose_files_the_run_recorded(tmp_path):
    site, p = overlay(tmp_path, {"toolz.pth": b"import os; os.system('id')\n"}, recorded=False)
    with pytest.raises(RebuildError, match="toolz.pth from toolz, which every start of its Python would run"):
        rebuild.check_overlay(site, p, SHARED)
    site, p = overlay(tmp_path / "ok", {"toolz.pth": b"import toolz\n"}, recorded=True)  # the run ran with it
    rebuild.check_overlay(site, p, SHARED)


@pytest.mark.parametrize("name", ["evil.pth", "sitecustomize.py", "toolz/extra.py"])
def test_a_file_no_installed_distribution_lists_is_refused(tmp_path, name):
    site, p = overlay(tmp_path)
    (site / name).write_text("import os\n")
    with pytest.raises(RebuildError, match=f"holds {name}, which no distribution it installed lists"):
        rebuild.check_overlay(site, p, SHARED)


def test_a_file_unlike_its_record_a_shipped_pyc_a_link_and_a_foreign_distribution_are_refused(tmp_path):
    site, p = overlay(tmp_path / "a")
    (site / "toolz" / "__init__.py").write_text("import os\n")
    with pytest.raises(RebuildError, match="not what its RECORD lists"):
        rebuild.check_overlay(site, p, SHARED)
    site, p = overlay(tmp_path / "b", {"toolz/__pycache__/m.cpython-311.pyc": b"\x00" * 16}, recorded=False)
    with pytest.raises(RebuildError, match="compiled code shipped in a wheel"):
        rebuild.check_overlay(site, p, SHARED)
    site, p = overlay(tmp_path / "c")
    (site / "link").symlink_to("/etc")
    with pytest.raises(RebuildError, match="holds a link"):
        rebuild.check_overlay(site, p, SHARED)
    site, p = overlay(tmp_path / "d")
    installed(site, "helpful", "2.0", {"helpful.py": b""})
    with pytest.raises(RebuildError, match="holds helpful 2.0, which the rebuild did not install"):
        rebuild.check_overlay(site, p, SHARED)
    site, p = overlay(tmp_path / "e")
    (site / rebuild.SHARED_PTH).write_text(SHARED + "import os\n")
    with pytest.raises(RebuildError, match="this launcher did not write"):
        rebuild.check_overlay(site, p, SHARED)


def test_a_poisoned_cached_environment_is_refused_before_its_python_starts(tmp_path, monkeypatch):
    """The cache was keyed by the package list only: a trusted run reused an overlay a wheel had poisoned."""
    p = rebuild.Plan(recorded={"toolz": "1.0"}, install=(), used={})
    monkeypatch.setattr(rebuild, "plan", lambda *a, **k: p)
    monkeypatch.setattr(rebuild, "cache_key", lambda *a, **k: "cached")
    monkeypatch.setattr(rebuild, "verify", lambda *a, **k: pytest.fail("the environment's Python was started"))
    venv = tmp_path / "cache" / "cached"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    site = rebuild.overlay_site(venv)
    site.mkdir(parents=True)
    (site / rebuild.SHARED_PTH).write_text(rebuild.pth_text(rebuild.shared_site_dirs()))
    (site / "zz-poison.pth").write_text("import os; os.system('touch /tmp/owned')\n")
    with pytest.raises(RebuildError, match="holds zz-poison.pth"):
        rebuild.python_environment({"software": {}}, cache_root=tmp_path / "cache")


def test_the_cache_key_follows_the_wheels_an_archive_brought():
    p = rebuild.Plan(recorded={"toolz": "1.0"}, install=("toolz==1.0",), used={})
    one = rebuild.cache_key(p, "py", ["/s"], {"toolz-1.0-py3-none-any.whl": "a" * 64})
    other = rebuild.cache_key(p, "py", ["/s"], {"toolz-1.0-py3-none-any.whl": "b" * 64})
    assert one != other != rebuild.cache_key(p, "py", ["/s"])
