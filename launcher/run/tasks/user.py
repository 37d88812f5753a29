"""User training code: ``train=custom`` (a function) and ``train=script`` (a file).

Both run in the job process after the determinism bootstrap. What they save under
``launcher.output_dir()`` is hashed into result.json by the bootstrap; a model given
to ``launcher.record_model()`` supplies the run's ``weights_sha256``.
"""

from __future__ import annotations

import importlib
import runpy
import sys

from launcher.errors import ConfigError
from launcher.run import userapi
from launcher.run.tasks import TaskContext


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
    if train.name == "custom":
        if train.path:
            sys.path.insert(0, str(train.path))
        returned = load_entrypoint(str(train.entrypoint))(ctx.cfg, ctx.seed)
    else:
        sys.argv = [str(train.script), *map(str, train.args)]
        runpy.run_path(str(train.script), run_name="__main__")
        returned = None
    result: dict = {}
    if isinstance(returned, dict):
        result["final_metrics"] = {k: float(v) for k, v in returned.items()}
    if userapi._recorded_models:
        first = next(iter(userapi._recorded_models.values()))
        result.update(first)
        result["models"] = dict(userapi._recorded_models)
    return result
