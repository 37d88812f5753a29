"""User training code: ``train=custom`` (a function), ``train=script`` (a file) and
``train=notebook`` (a Jupyter notebook's code cells, ``launcher.job.notebook``).

Both run in the job process after the determinism bootstrap. What they save under
``launcher.output_dir()`` is hashed into result.json by the bootstrap; a model given
to ``launcher.record_model()`` supplies the run's ``weights_sha256``.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys

from launcher.errors import ConfigError, ResumeError
from launcher.job import userapi
from launcher.job.observe import reads
from launcher.job.tasks import TaskContext
from launcher.job.training import observer as observe
from launcher.record.store import snapshot


def load_entrypoint(spec: str):
    """``pkg.module:function`` -> the function, or ConfigError saying what is wrong."""
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"train.entrypoint {spec!r}: cannot import {module_name!r}: {exc}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError(f"train.entrypoint {spec!r}: {module_name} has no function {func_name!r}")
    return func


def run(ctx: TaskContext) -> dict:
    train = ctx.cfg.train
    ctx.effective["jit_compile"] = None  # user code passes jit_compile to its own compile()
    observer = None
    if train.get("observe", True):
        fit = ctx.resume if ctx.resume and ctx.resume.get("fit") else None  # a checkpoint of an observed fit
        observer = observe.install(
            ctx.run_dir, ctx.trace_every, ctx.log_epoch, checkpoint_settings(ctx), fit, ctx.facts_so_far
        )
    ctx.result_so_far = lambda: observed_result(ctx, observer, None)  # a job that ends with os._exit(0)
    if train.name == "custom":
        # The job's interpreter starts with safe paths (-P): the entrypoint's directory, or
        # the launch directory as `python -m` would have it, comes first only now, after
        # the launcher itself was imported from where it was installed.
        sys.path.insert(0, snapshot.rooted(str(train.path) if train.path else os.getcwd(), ctx.root))
        returned = load_entrypoint(str(train.entrypoint))(ctx.cfg, ctx.seed)
    elif train.name == "notebook":
        from omegaconf import OmegaConf

        from launcher.job import notebook

        path = snapshot.rooted(str(train.notebook), ctx.root)
        params = OmegaConf.to_container(train.params) if train.get("params") is not None else {}
        timings = notebook.execute(path, params, ctx.output_dir / os.path.basename(str(train.notebook)))
        returned = None
    else:
        returned = run_script(snapshot.rooted(str(train.script), ctx.root), [str(a) for a in train.args])
    if observer is not None and observer.resume:
        raise ResumeError(
            f"the resumed code never reached the Keras fit its checkpoint is in (fit "
            f"{observer.resume.get('fit')}); nothing was resumed"
        )
    result = observed_result(ctx, observer, returned)
    if train.name == "notebook":
        result.setdefault("timings", {}).update(timings)  # the shell's start and the cells', apart
    return result


def checkpoint_settings(ctx: TaskContext) -> dict | None:
    """{"every", "keep"}: checkpoint each observed fit's epochs (seeded and strict runs), or None."""
    every = int(ctx.cfg.train.get("checkpoint_every", 1) or 0)
    if ctx.plan.level == "off" or not every:
        return None
    return {"every": every, "keep": int(ctx.cfg.train.get("checkpoint_keep", 2))}


def observed_result(ctx: TaskContext, observer, returned: object) -> dict:
    """What the job trained, as observed so far: metrics, the weights' digests, the kept values."""
    train = ctx.cfg.train
    result: dict = {}
    if observer is not None:
        jit = observe.jit_compile_in_effect(observer)
        if jit:  # what the model asked for, and what ran (Keras turns XLA off under op determinism)
            ctx.effective["jit_compile"] = jit
            for name, j in jit.items():
                if j["requested"] and not j["in_effect"]:
                    print(
                        f"[launch] note: model {name!r} asked for jit_compile=True; it ran without XLA "
                        "(off under op determinism), and the record says so",
                        flush=True,
                    )
        observer.finish()
        result["observed"] = observer.summary()
        if observer.history:
            result["final_metrics"] = dict(observer.history)
        digest = observer.digest()
        if digest is not None:
            result["weights_sha256"], result["layer_sha256"] = digest
            if train.get("save_weights"):
                arrays = observer.named_arrays()
                size = sum(value.nbytes for _, _, value in arrays)
                if size <= int(train.get("save_weights_max_mb", 256)) << 20:
                    result["weights_file"] = save_weights(ctx.run_dir, arrays)
                else:
                    result["weights_not_saved"] = f"{size} bytes, over train.save_weights_max_mb"
        result.setdefault("timings", {})["trace_s"] = observer.seconds
        if observer.checkpoint_seconds:
            result["timings"]["checkpoint_s"] = list(observer.checkpoint_seconds)
    if isinstance(returned, dict):
        result["final_metrics"] = {k: float(v) for k, v in returned.items()}
    if userapi._recorded_models:  # the explicit choice of what to hash wins
        first = next(iter(userapi._recorded_models.values()))
        result.update(first)
        result["models"] = dict(userapi._recorded_models)
    return result


WEIGHTS_FILE = "weights.npz"


def save_weights(run_dir, named_arrays: list) -> str:
    """The trained variables' final values, in order, as ``RUN/weights.npz`` (keys ``NNNN path``)."""
    import io

    import numpy as np

    from launcher.record.store import runs

    buffer = io.BytesIO()
    np.savez(buffer, **{f"{i:04d} {name}": value for i, (_, name, value) in enumerate(named_arrays)})
    runs.write_bytes(run_dir / WEIGHTS_FILE, buffer.getvalue())
    return WEIGHTS_FILE


def run_script(script: str, args: list[str]) -> None:
    """Run ``script`` as ``python script.py ARGS`` would: as ``__main__``, its directory first on
    ``sys.path`` (so a helper module beside it imports), ``sys.exit(0)`` a normal end."""
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    reads.code_files.update({os.path.abspath(script), os.path.realpath(script)})  # keyed as the script
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
