"""The project's rules over a composed launch config, in one place.

Hydra composes the YAML groups in ``launcher/configs`` (``launcher.run.composition``), and
each section's schema checks every value on its own (``launcher.run.schema``); this module
enforces the rules that span settings (allowed values named in each message), resolves
what must be fixed once at launch (the seed, ``auto`` thread counts) and hashes the parts
of the config that can change a result.
"""

from __future__ import annotations

import hashlib
import json
import os

from omegaconf import DictConfig, OmegaConf

from launcher.errors import ConfigError
from launcher.job import determinism
from launcher.run import schema

TASKS = ("mnist", "custom", "script", "notebook")
RUNTIMES = ("local", "docker")
TRACKERS = ("none", "mlflow")  # the tracking config group (launcher.record.tracking)
# Fields that cannot change a result: left out of the config hash (dotted paths).
NOT_IN_HASH = (
    "store",  # where runs are written
    "sweep",  # what an optimizing sweeper optimizes, never what a run computes
    "config_dir",  # where the user's config files are: their values are in the config, their hashes in the fingerprint
    "runtime.slots",  # where a sweep job runs, never what it computes
    "determinism.trace_every",  # the trace reads weights, never changes them
    "train.observe",  # observation reads weights, never changes them (tested bit for bit)
    "train.save_weights",  # a copy of the final weights, written after training
    "train.save_weights_max_mb",  # how large that copy may be
    "tracking",  # MLflow logging reads the sealed run, after it ended (tested bit for bit)
    "distribute",  # the worker count is keyed as the run's cluster (fingerprint's cluster), with what it used
)
NOT_IN_HASH_DOCKER = (
    "image.ca_bundle",
    "image.index_url",
    "image.wheelhouse",  # where wheels come from
    "runtime.stop_timeout_s",
    "runtime.tmpfs_mb",  # how a job is stopped, its /tmp
    "runtime.mounts",
)  # where data is visible; what the job reads is hashed by content


def validate(cfg: DictConfig) -> None:
    """Raise ``ConfigError`` for the first invalid value, naming what is allowed.

    Each value on its own, its type and its range, is its schema's (``schema.check``: each section
    a mapping, ``train.epochs`` a positive integer); here are the options' names and the rules that
    span settings: a level's thread counts, XLA for user code, a task's inputs where its job will
    read them, a tracker's package.

    Raises:
        ConfigError: the first value or combination that is not allowed, and what is (exit 2).
        DataError: ``train.data`` is not readable MNIST where the job will read it (exit 2).
    """
    schema.check(cfg)
    train, det = cfg.train, cfg.determinism
    if train.name not in TASKS:
        raise ConfigError(f"train={train.name!r} is unknown; choose one of {', '.join(TASKS)}")
    if det.level not in determinism.LEVELS:
        raise ConfigError(f"determinism={det.level!r} is unknown; choose one of {', '.join(determinism.LEVELS)}")
    if cfg.runtime.name not in RUNTIMES:
        raise ConfigError(f"runtime={cfg.runtime.name!r} is unknown; choose one of {', '.join(RUNTIMES)}")
    tracking = cfg.get("tracking")
    if tracking is not None and tracking.get("name") not in TRACKERS:
        raise ConfigError(f"tracking={tracking.get('name')!r} is unknown; choose one of {', '.join(TRACKERS)}")
    for key in ("intra_op_threads", "inter_op_threads"):
        if det.level in ("strict", "portable") and det[key] is None:
            raise ConfigError(f"determinism.{key} must be set in {det.level} mode (an integer or auto)")
    if det.get("jit_compile") and train.name != "mnist":
        raise ConfigError(
            f"determinism.jit_compile applies to train=mnist; train={train.name} code passes "
            "jit_compile to its own model.compile()"
        )
    _check_task(cfg)
    _check_distribute(cfg)
    if tracking is not None and tracking.get("name") == "mlflow":
        import importlib.util

        if importlib.util.find_spec("mlflow") is None:  # before training, not a warning after it
            raise ConfigError("tracking=mlflow needs mlflow: pip install 'tf-repro-launcher[mlflow]'")


def _check_distribute(cfg: DictConfig) -> None:
    """``distribute.workers``: a positive integer; more than one runs the user's own code (which
    builds ``tf.distribute.MultiWorkerMirroredStrategy``) as that many local processes."""
    node = cfg.get("distribute")
    if node is None:
        return
    if not OmegaConf.is_dict(node):
        raise ConfigError(f"distribute is a set of settings, not a value (distribute={node!r}); set distribute.workers")
    workers = node.get("workers")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"distribute.workers must be a positive integer (1: one process), got {workers!r}")
    if workers == 1:
        return
    if cfg.train.name not in ("script", "custom"):
        raise ConfigError(
            f"distribute.workers={workers} runs your own code, which builds tf.distribute.MultiWorkerMirroredStrategy "
            f"(train=script or train=custom); train={cfg.train.name} trains on one worker"
        )
    if cfg.runtime.name != "local":
        raise ConfigError(
            f"distribute.workers={workers} starts its workers on this machine or under Slurm (runtime=local); "
            f"runtime={cfg.runtime.name} runs one container"
        )


def _check_task(cfg: DictConfig) -> None:
    """What the task needs from outside the config: mnist's data where the job will read it (in a
    container: without network), custom's entrypoint, a script or notebook file."""
    train = cfg.train
    if train.name == "mnist":
        if train.data not in ("sample", "full") and not os.path.exists(os.path.expanduser(train.data)):
            raise ConfigError(f"train.data {train.data!r} does not exist (use sample, full, or a path)")
        from launcher.job import data  # numpy, only now

        data.check(train.data, in_container=cfg.runtime.name == "docker")
    elif train.name == "custom":
        if OmegaConf.is_missing(train, "entrypoint") or ":" not in str(train.entrypoint):
            raise ConfigError("train=custom needs train.entrypoint=package.module:function")
    elif train.name == "script":
        if OmegaConf.is_missing(train, "script"):
            raise ConfigError("train=script needs train.script=path/to/train.py")
        if not os.path.isfile(str(train.script)):
            raise ConfigError(f"train.script {train.script!r} is not a file")
    elif train.name == "notebook":
        _check_notebook(train)


def check_entrypoint(cfg: DictConfig, cwd: str) -> None:
    """train=custom on this machine: the entrypoint's module can be found where the job will
    look (``train.path``, else ``cwd``, then ``sys.path``), so a typo is bad input (exit 2,
    no run) rather than a failed run. Found without importing it: no user code runs here."""
    import importlib.machinery
    import importlib.util
    import sys

    train = cfg.train
    if train.name != "custom" or cfg.runtime.name != "local" or ":" not in str(train.get("entrypoint", "")):
        return
    module = str(train.entrypoint).partition(":")[0]
    first = os.path.join(cwd, os.path.expanduser(str(train.path))) if train.get("path") else cwd
    top, *rest = module.split(".")
    if top in sys.modules:
        spec = sys.modules[top].__spec__
    else:
        saved = list(sys.path)
        sys.path.insert(0, first)
        try:  # a top-level name: finding it runs no code (editable installs have finders of their own)
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            spec = None
        finally:
            sys.path[:] = saved
    found = top
    for part in rest:
        if spec is None:
            break
        locations = spec.submodule_search_locations
        spec = importlib.machinery.PathFinder.find_spec(part, list(locations)) if locations else None
        if spec is None:
            raise ConfigError(f"train.entrypoint {str(train.entrypoint)!r}: {found} has no module {part!r}")
        found = f"{found}.{part}"
    if spec is None:
        raise ConfigError(
            f"train.entrypoint {str(train.entrypoint)!r}: no module {top!r} in {first} or on "
            "sys.path; set train.path=DIR to where it lives"
        )


def _check_notebook(train: DictConfig) -> None:
    """train=notebook: a notebook file, parameters by name, and the extra that runs it installed."""
    import importlib.util

    from launcher.record import notebooks

    if OmegaConf.is_missing(train, "notebook"):
        raise ConfigError("train=notebook needs train.notebook=path/to/NB.ipynb")
    if not os.path.isfile(str(train.notebook)):
        raise ConfigError(f"train.notebook {train.notebook!r} is not a file")
    notebooks.load(str(train.notebook))
    params = train.get("params")
    if params is not None and not isinstance(params, DictConfig):
        raise ConfigError(
            f"train.params must be a mapping of names to values ('train.params={{lr: 0.01}}'), got {params!r}"
        )
    notebooks.render_parameters(OmegaConf.to_container(params) if params is not None else {})
    missing = [m for m in ("IPython", "nbformat") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"train=notebook needs {' and '.join(missing)}: {notebooks.EXTRA}")


def resolve(cfg: DictConfig, cpu_count: int | None = None) -> DictConfig:
    """A copy of ``cfg`` with everything fixed that must not change on replay.

    The seed becomes a top-level ``seed`` (from ``+seed``, else the level's default,
    else drawn from the OS and recorded); ``auto`` thread counts become numbers; a
    script path becomes absolute. Resolving a resolved config changes nothing.
    """
    validate(cfg)
    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    OmegaConf.set_struct(out, False)
    seed = cfg.get("seed")
    if seed is None:
        seed = cfg.determinism.seed
    if seed is None:
        seed = determinism.draw_seed()
    out.seed = int(seed)
    cores = cpu_count if cpu_count is not None else os.cpu_count()
    for key in ("intra_op_threads", "inter_op_threads"):
        out.determinism[key] = determinism.resolve_threads(cfg.determinism[key], cores)
    if out.train.name == "script":
        out.train.script = os.path.abspath(str(out.train.script))
    if out.train.name == "notebook":
        out.train.notebook = os.path.abspath(str(out.train.notebook))
    if out.train.name == "mnist" and out.train.data not in ("sample", "full"):
        out.train.data = os.path.abspath(os.path.expanduser(str(out.train.data)))
    OmegaConf.set_struct(out, True)
    return out


def hashed_part(cfg: DictConfig | dict, launch_dir: str | None = None) -> dict:
    """The config without the fields that cannot change a result: what ``config_hash`` hashes.

    With ``launch_dir`` (where the job was launched: the project), every value that is a path
    inside it is taken relative to it (``project_relative``), so a second checkout of the same
    project hashes the same; a path outside it (``~/.keras/datasets``, ``/data``) keeps its
    absolute name, which names the same place on another machine. Without it, paths stay as
    the resolved config has them (how fingerprint schemas before 5 hashed)."""
    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else json.loads(json.dumps(cfg))
    local = data.get("runtime", {}).get("name", "local") == "local"
    # The image settings do not reach a local run.
    for path in (*NOT_IN_HASH, *(("image",) if local else NOT_IN_HASH_DOCKER)):
        *parents, leaf = path.split(".")
        node = data
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return project_relative(data, launch_dir) if launch_dir else data


def project_relative(value: object, launch_dir: str) -> object:
    """``value`` (a config's values: mappings, lists, strings) with each absolute path inside
    ``launch_dir`` made relative to it: a value that is such a path (``train.script``,
    ``train.data``, a ``train.args`` entry), or an option that ends in one (``--data=/proj/x.npz``).
    The resolved config keeps absolute paths to run from; only what is hashed is relative."""
    root = os.path.normpath(launch_dir)
    if root == "/":  # every path lies there: relative says nothing more
        return value
    if isinstance(value, dict):
        return {k: project_relative(v, launch_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [project_relative(v, launch_dir) for v in value]
    if not isinstance(value, str):
        return value
    head, sep, tail = value.partition("=")
    if sep and not head.startswith("/"):  # --data=/proj/x.npz, data=/proj/x.npz
        return head + sep + str(project_relative(tail, launch_dir))
    path = os.path.normpath(value)
    if os.path.isabs(value) and (path == root or path.startswith(root + "/")):
        return os.path.relpath(path, root)
    return value


def config_hash(cfg: DictConfig | dict, launch_dir: str | None = None) -> str:
    """sha256 of the canonical JSON of the config without fields that cannot affect results,
    paths inside ``launch_dir`` relative to it (``hashed_part``)."""
    canonical = json.dumps(hashed_part(cfg, launch_dir), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
