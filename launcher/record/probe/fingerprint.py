"""The fingerprint of a run: what it ran on and read, assembled in two halves.

The launcher side (``collect``) records hardware, environment, code and the config
hash before the job starts; the job process adds what only it can measure
(``job_facts``: software with TensorFlow's build, the effective determinism settings,
the data read), merged by ``merge_job_facts``. Probes live in ``probes``, the
environment allowlist in ``environment``, the comparability key in ``key``.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from pathlib import Path

from launcher.errors import SchemaError
from launcher.record.hashing import file_sha256
from launcher.record.probe import cpuid
from launcher.record.probe.environment import allowed_env
from launcher.record.probe.probes import code, hardware, software, tensorflow_gpu_notes, tensorflow_software

# 2: code.modules, software.distributions and software.libraries (what the job used),
# data from every file the job read, determinism.keras.
# 3: code.launcher_modules (the launcher files the job imported, which replace the whole
# package's hash in the key), distributions by content, the CPU's family, model and stepping.
# 4: code.launcher_modules by module name (launcher.job.observe.reads), not file path: the key
# compares their contents, so a module moved unchanged refuses nothing.
# 5: launch_dir (where the job was launched: the project), and keyed relative to it: config_sha256
# hashes the config's paths inside it relative to it (launcher.run.config.hashed_part), and the
# key names data files and libraries inside it relatively (launcher.record.probe.key), so a second
# checkout of the same project gives the same key. Schema 4 and older hashed and named them
# absolute: their key is read as they recorded it.
# Older runs stay readable; what they lack is unknown to the comparability key.
SCHEMA = 5
READABLE_SCHEMAS = (1, 2, 3, 4, 5)


def collect(
    env: Mapping[str, str],
    cwd: str,
    config_sha256: str,
    script: str | None = None,
    notebook: str | None = None,
    launch_dir: str | None = None,
) -> dict:
    """The launcher-side fingerprint of a job about to start with environment ``env``.

    ``software``, ``determinism`` and ``data`` are filled in by the job process
    (``job_facts``), since a container's software is not the host's. ``launch_dir`` is the
    project the job was launched in (a replay's: the original's, not the laid-out copy it runs
    in; default ``cwd``): not keyed itself, the key names what lies in it relatively.
    """
    return {
        "schema": SCHEMA,
        "launch_dir": launch_dir or cwd,
        "hardware": hardware(),
        "software": None,
        "environment": allowed_env(env),
        "code": code(cwd, script, notebook),
        "config_sha256": config_sha256,
        "host": {"hostname": socket.gethostname()},
        "determinism": None,
        "data": None,
    }


def config_files(config_dir: Mapping | None) -> dict[str, str]:
    """The user's config files a run was composed from (``launch --config-dir``): each
    name under the config dir -> the sha256 of its content now, or ``missing``.

    ``config_dir`` is the resolved config's ``config_dir`` node (``path``, ``files``), or
    None when no file of the user's was read. The values are already in the config; the
    hashes show a change in a file that the job's own code reads at run time, and they
    are taken again, from the files on disk, when the run is replayed or resumed.
    """
    if not config_dir:
        return {}
    root = Path(str(config_dir["path"]))
    out = {}
    for name in sorted(str(n) for n in config_dir["files"]):
        path = root / name
        out[name] = file_sha256(path) if path.is_file() else "missing"
    return out


def job_facts(
    effective: dict, data_files: Mapping[str, str], used: dict | None = None, launch_dir: str | None = None
) -> dict:
    """What the job process measures: its software (with TensorFlow's build), the effective
    determinism settings, and what it used (``launcher.record.probe.usage.gather``): the modules,
    distributions and libraries it loaded and the data it read. Called in the job process.

    ``data_files`` are files a task names itself (the mnist task's data source, an
    absolute path from the config: recorded as such, where a replay of that config reads).
    """
    sw = software()
    sw.update(tensorflow_software())
    data = {}
    named = set()
    for name, digest in data_files.items():
        if os.path.isabs(name):
            named.add(os.path.realpath(name))
            name = os.path.realpath(name)
        data[name] = digest
    facts = {
        "software": sw,
        "determinism": effective,
        "data": dict(sorted(data.items())),
        "modules": None,
        "cpu_seen": cpuid.read(),
    }
    if used is not None:
        sw["distributions"], sw["libraries"] = used["distributions"], used["libraries"]
        sw["distributions_probed"] = used.get("distributions_probed", {})  # for reading: out of the key
        for name, digest in used["data"].items():
            path = name if os.path.isabs(name) else os.path.join(launch_dir or os.getcwd(), name)
            if os.path.realpath(path) not in named:
                data[name] = digest
        facts["data"] = dict(sorted(data.items()))
        facts["modules"] = used["modules"]
        facts["launcher_modules"] = used.get("launcher")
    return facts


def merge_job_facts(fp: dict, facts: dict, container: dict | None = None) -> dict:
    """The complete fingerprint: launcher side, job side, and the container if there was one."""
    out = json.loads(json.dumps(fp))
    out.update(software=facts["software"], determinism=facts["determinism"], data=facts["data"])
    out["software"]["container"] = container
    out["code"]["modules"] = facts.get("modules")
    out["code"]["launcher_modules"] = facts.get("launcher_modules")
    out["environment_read"] = facts.get("environment_read")
    out["observation"] = facts.get("observation")  # how completely the job's reads were seen: not keyed
    if facts.get("cluster") is not None:  # a multi-worker job: what its strategy used (the run's: workers.settle)
        out["cluster"] = facts["cluster"]
    # The CPU the job's own instructions saw (CPUID: the emulated one under qemu-user, where
    # /proc/cpuinfo is the host's): for reading, not keyed; hardware.cpu is what is keyed.
    out["hardware"]["cpu_seen_by_job"] = facts.get("cpu_seen")
    # Where the GPUs TensorFlow saw in the job (software.tf_gpus) disagree with those the
    # launcher listed (hardware.gpus, from NVML or nvidia-smi), in words: for reading, not keyed.
    out["hardware"]["gpu_notes"] = tensorflow_gpu_notes(
        out["hardware"], out["software"].get("tf_gpus"), out.get("environment") or {}
    )
    return out


def check_schema(fp: dict, where: str) -> None:
    if fp.get("schema") not in READABLE_SCHEMAS:
        raise SchemaError(
            f"{where}: fingerprint schema {fp.get('schema')!r} is not readable by this launcher "
            f"(reads {', '.join(map(str, READABLE_SCHEMAS))})"
        )
