"""MLflow tracking of runs, sweeps and verdicts (``tracking=mlflow``): the one module that imports mlflow.

MLflow is an outside system, like Docker: it is imported here only, lazily, and only
when a run's config says ``tracking.name: mlflow``. Everything is logged by the launcher
process *after* the run is sealed, from the files of the run directory, so tracking can
never change a run: a tracking failure (no mlflow installed, the server down, a locked
database) is one warning line, and the run stays exactly as sealed.

What a run becomes in MLflow: the resolved config as params (dotted keys); each epoch's
metrics with the epoch as step; tags ``launch.run_id``, ``launch.level``, ``launch.seed``,
``launch.status``, ``launch.key_sha256`` (the comparability-key hash),
``launch.weights_sha256`` and a few more; ``fingerprint.json``, ``config.yaml`` and
``result.json`` as artifacts. A sweep is a parent run (the summary's mean/std per metric
as its metrics) with its jobs as children. ``launch replay`` and ``launch sweep replay``
tag the runs they judged with ``launch.verdict``.

The default tracking URI is a SQLite database in the store, ``sqlite:///<store>/mlflow.db``
(artifacts beside it in ``<store>/mlartifacts``); ``tracking.uri`` names a server instead.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import logging
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from launcher import console
from launcher.record import layout

T = TypeVar("T")
DB = "mlflow.db"
ARTIFACTS = "mlartifacts"
ARTIFACT_FILES = (layout.FINGERPRINT, layout.CONFIG, layout.RESULT)  # logged as the MLflow run's artifacts
TAG = "launch."
# MLflow's HTTP client retries for minutes by default: a launcher must not hang on a dead server.
# Its usage telemetry (a background thread posting to MLflow's servers) is not something a run
# asked for. The user's own settings of these variables win.
MLFLOW_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
QUIET_LOGGERS = ("mlflow", "alembic", "urllib3", "sqlalchemy", "git")
STATUS = {"complete": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}
BATCH = 100  # MLflow's limit on params (and tags) per log_batch call


@dataclass(frozen=True)
class Target:
    """Where a run is tracked: an MLflow tracking URI and experiment name."""

    uri: str
    experiment: str
    artifact_location: str | None  # for a local database: beside it, never the working directory


# ---------------------------------------------------------------- what is logged (pure)
def target(cfg: dict, store: Path) -> Target | None:
    """The tracking target of a run config, or None when ``tracking`` is not ``mlflow``."""
    tracking = cfg.get("tracking") or {}
    if tracking.get("name", "none") != "mlflow":
        return None
    experiment = str(tracking.get("experiment") or (cfg.get("train") or {}).get("name") or "launch")
    if tracking.get("uri"):
        return Target(str(tracking["uri"]), experiment, None)
    root = Path(store).absolute()
    return Target(f"sqlite:///{root / DB}", experiment, (root / ARTIFACTS).as_uri())


def params(cfg: dict) -> dict[str, str]:
    """The config flattened to dotted keys, every value as text (MLflow params are strings)."""
    out: dict[str, str] = {}

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        else:
            out[prefix[:-1]] = json.dumps(node) if isinstance(node, (list, dict)) else str(node)

    walk(cfg, "")
    return {k: v[:6000] for k, v in sorted(out.items())}  # MLflow's limit on a param value


def epoch_metrics(lines: list[dict]) -> list[tuple[str, float, int]]:
    """(name, value, epoch) for every numeric value of every metrics.jsonl line."""
    out = []
    for line in lines:
        epoch = line.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            continue
        for name, value in sorted(line.items()):
            if name != "epoch" and isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append((metric_name(name), float(value), epoch))
    return out


def metric_name(name: str) -> str:
    """``name`` with the characters MLflow refuses in a metric name replaced by ``_`` ("f1@0.5" -> "f1_0.5")."""
    return re.sub(r"[^\w\-. /:]", "_", name)


def run_tags(run_dir: Path, cfg: dict, fp: dict | None, result: dict, status: dict, key_sha256: str | None) -> dict:
    """The tags of a run: who it is, how it ended, and the hashes that identify its bits."""
    det = cfg.get("determinism") or {}
    tags = {
        "run_id": run_dir.name,
        "run_dir": str(run_dir.absolute()),
        "task": (cfg.get("train") or {}).get("name"),
        "level": det.get("level"),
        "seed": cfg.get("seed"),
        "status": status.get("state"),
        "key_sha256": key_sha256,
        "config_sha256": (fp or {}).get("config_sha256"),
        "weights_sha256": result.get("weights_sha256"),
        "error": status.get("error"),
    }
    out = {TAG + k: str(v)[:5000] for k, v in tags.items() if v is not None}
    out["mlflow.runName"] = run_dir.name
    return out


def sweep_metrics(summary: dict) -> dict[str, float]:
    """The parent run's metrics: each metric's mean and std over the sweep's completed jobs."""
    out = {}
    for name, stats in sorted((summary.get("metrics") or {}).items()):
        for stat in ("mean", "std", "min", "max"):
            out[f"{name}_{stat}"] = float(stats[stat])
    out["distinct_weights"] = float(summary.get("distinct_weights", 0))
    return out


def start_time_ms(run_dir: Path) -> int | None:
    """A run's start from its name (``YYYYMMDD-HHMMSS-xxxxxx``, local time), in ms; None if unreadable."""
    try:
        return int(_dt.datetime.strptime(run_dir.name[:15], "%Y%m%d-%H%M%S").timestamp() * 1000)
    except ValueError:
        return None


# ---------------------------------------------------------------- talking to MLflow
def log_run(run_dir: Path, cfg: dict | None = None) -> str | None:
    """Log one ended run (sealed, failed or interrupted) if its config asks; the MLflow run id.

    Never raises: a failure is one warning line on stderr.
    """
    run_dir = Path(run_dir)
    cfg = _config(run_dir) if cfg is None else _plain(cfg)
    where = target(cfg, run_dir.parent) if cfg else None
    if where is None:
        return None
    return _with_client(where, lambda client: _log_run(client, where, run_dir, cfg))


def log_sweep(sweep_dir: Path, summary: dict, meta: dict) -> str | None:
    """Log a finished sweep as a parent run with its jobs' runs as children; the parent's id."""
    sweep_dir = Path(sweep_dir)
    jobs = [j for j in summary.get("jobs", []) if j.get("run_dir") and Path(j["run_dir"]).is_dir()]
    cfg = _config(Path(jobs[0]["run_dir"])) if jobs else {}
    where = target(cfg, Path(jobs[0]["run_dir"]).parent) if cfg else None  # the jobs' store
    if where is None:
        return None

    def log(client) -> str:
        from mlflow.entities import Metric, Param, RunTag

        tags = {
            "mlflow.runName": f"sweep {sweep_dir.name}",
            TAG + "sweep_id": sweep_dir.name,
            TAG + "sweep_dir": str(sweep_dir.absolute()),
            TAG + "kind": "sweep",
            TAG + "status": "complete" if summary.get("ok") else "incomplete",
        }
        parent = client.create_run(_experiment_id(client, where), start_time=start_time_ms(sweep_dir), tags=tags)
        pid = parent.info.run_id
        for job in jobs:
            _log_run(
                client,
                where,
                Path(job["run_dir"]),
                _config(Path(job["run_dir"])),
                parent=pid,
                extra={TAG + "sweep_id": sweep_dir.name, TAG + "sweep_job": str(job["num"])},
            )
        now = _now_ms()
        sweep_params = {
            "overrides": " ".join(meta.get("overrides", [])),
            "swept": ", ".join(meta.get("swept", [])),
            "launcher": meta.get("launcher"),
            "jobs": len(summary.get("jobs", [])),
        }
        client.log_batch(
            pid,
            metrics=[Metric(k, v, now, 0) for k, v in sweep_metrics(summary).items()],
            params=[Param(k, str(v)[:6000]) for k, v in sweep_params.items()],
            tags=[RunTag(f"{TAG}jobs_{state}", str(n)) for state, n in summary.get("counts", {}).items()],
        )
        client.set_terminated(pid, "FINISHED" if summary.get("ok") else "FAILED", now)
        return pid

    return _with_client(where, log)


def tag_verdict(run_dirs: list[Path], verdict: str, detail: dict[str, str] | None = None) -> None:
    """Tag the MLflow runs of the judged runs (found by ``launch.run_id``) with a verdict."""
    cfg = _config(Path(run_dirs[0])) if run_dirs else {}
    where = target(cfg, Path(run_dirs[0]).parent) if cfg else None
    if where is None:
        return
    tags = {TAG + "verdict": verdict, **{TAG + f"verdict.{k}": v for k, v in (detail or {}).items()}}

    def tag(client) -> None:
        for run_dir in run_dirs:
            for found in _find(client, where, TAG + "run_id", Path(run_dir).name):
                for k, v in tags.items():
                    client.set_tag(found.info.run_id, k, str(v)[:5000])

    _with_client(where, tag)


def tag_sweep(sweep_dir: Path, job_run_dir: Path | None, tags: dict[str, str]) -> None:
    """Tag a sweep's parent run (found by ``launch.sweep_id``), e.g. with ``launch sweep replay``'s verdict.

    ``job_run_dir``: one of the sweep's runs, whose config and store say where the sweep is tracked.
    """
    cfg = _config(Path(job_run_dir)) if job_run_dir else {}
    where = target(cfg, Path(job_run_dir).parent) if cfg else None
    if where is None:
        return

    def tag(client) -> None:
        for found in _find(client, where, TAG + "sweep_id", Path(sweep_dir).name, kind="sweep"):
            for k, v in tags.items():
                client.set_tag(found.info.run_id, TAG + k, str(v)[:5000])

    _with_client(where, tag)


def _log_run(
    client, where: Target, run_dir: Path, cfg: dict, parent: str | None = None, extra: dict | None = None
) -> str:
    from mlflow.entities import Metric, Param

    from launcher.record.probe import key
    from launcher.record.store import runs

    paths = layout.RunPaths(run_dir)
    fp = _read_json(paths.fingerprint)
    result = _read_json(paths.result) or {}
    status = runs.status(run_dir)
    key_sha = None
    if fp and status.get("state") == "complete":
        key_sha = key.key_sha256(fp)
    tags = run_tags(run_dir, cfg, fp, result, status, key_sha)
    replay_of = (_read_json(paths.job) or {}).get("replay_of")
    if replay_of:
        tags[TAG + "replay_of"] = str(replay_of)
    tags.update(extra or {})
    if parent:
        tags["mlflow.parentRunId"] = parent
    run = client.create_run(_experiment_id(client, where), start_time=start_time_ms(run_dir), tags=tags)
    rid = run.info.run_id
    try:
        now = _now_ms()
        metrics = [Metric(n, v, now, step) for n, v, step in epoch_metrics(_read_jsonl(paths.metrics))]
        param_items = [Param(k, v) for k, v in params(cfg).items()]
        for i in range(0, max(len(param_items), len(metrics), 1), BATCH):
            client.log_batch(rid, metrics=metrics[i : i + BATCH], params=param_items[i : i + BATCH])
        for name in ARTIFACT_FILES:
            if (run_dir / name).is_file():
                client.log_artifact(rid, str(run_dir / name))
        client.set_terminated(rid, STATUS.get(status.get("state"), "FAILED"), _now_ms())
        return rid
    except Exception:
        with contextlib.suppress(Exception):  # not left RUNNING, if MLflow still answers
            client.set_terminated(rid, "FAILED", _now_ms())
        raise


def _find(client, where: Target, tag: str, value: str, kind: str | None = None) -> list:
    exp = client.get_experiment_by_name(where.experiment)
    if exp is None:
        return []
    found = client.search_runs([exp.experiment_id], filter_string=f"tags.`{tag}` = '{value}'", max_results=100)
    return [r for r in found if kind is None or r.data.tags.get(TAG + "kind") == kind]


def _experiment_id(client, where: Target) -> str:
    exp = client.get_experiment_by_name(where.experiment)
    if exp is not None:
        return exp.experiment_id
    return client.create_experiment(where.experiment, artifact_location=where.artifact_location)


def _with_client(where: Target, action: Callable[[object], T]) -> T | None:
    """``action(client)`` with an MlflowClient for ``where``, quiet and quick to give up.

    Any failure (mlflow missing, the server down, a locked database) becomes one warning
    line and None: tracking must never fail a run. The process environment is restored
    afterwards, whatever MLflow or the libraries it imports set in it: a later job of this
    process (a sweep's replays, an audit's trials) inherits it, and it is part of their key.
    """
    saved_env = dict(os.environ)
    saved_levels: dict[str, int] = {}
    for k, v in MLFLOW_ENV.items():
        os.environ.setdefault(k, v)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                from mlflow import MlflowClient  # configures mlflow's loggers: quieten them after
            except ImportError:
                raise RuntimeError("mlflow is not installed (pip install 'tf-repro-launcher[mlflow]')") from None
            for name in QUIET_LOGGERS:
                saved_levels[name] = logging.getLogger(name).level
                logging.getLogger(name).setLevel(logging.CRITICAL)
            return action(MlflowClient(tracking_uri=where.uri))
    except Exception as exc:
        warn(where, exc)
        return None
    finally:
        for k in set(os.environ) - set(saved_env):
            del os.environ[k]
        os.environ.update(saved_env)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)


def warn(where: Target, exc: BaseException) -> None:
    """The one line a tracking failure prints."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    cause = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)  # the socket's reason, buried in urllib3's text
    if cause:
        text = f"{cause.group(1).strip()}: {text}"
    if len(text) > 240:
        text = text[:237] + "..."
    console.log.warning("MLflow tracking to %s failed, the run is unaffected: %s", where.uri, text)


def _config(run_dir: Path) -> dict:
    try:
        from omegaconf import OmegaConf

        return _plain(OmegaConf.load(layout.RunPaths(run_dir).config))
    except Exception:  # an unreadable config: nothing to track
        return {}


def _plain(cfg) -> dict:
    if isinstance(cfg, dict):
        return cfg
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_jsonl(path: Path) -> list[dict]:
    out = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break
    return out


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
