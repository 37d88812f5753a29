"""One run on the launcher's side, from a composed config to a sealed result.

Owns the stages of a run that happen outside the job process: ``composition`` (Hydra),
``schema`` (each section's typed schema: every value checked), ``config`` (the project's
rules: check across settings, resolve, hash), ``job`` (the pipeline: resolve,
create the run directory, plan, fingerprint, run, seal, index), ``runtime`` (where the job
process runs), ``signals`` (a stop's record never cut short), ``gpus`` (a GPU request
checked before any run exists), ``precheck`` (a stored run's key against this
environment), ``resume``, ``rebuild`` (a run's recorded environment, rebuilt) and
``emulation`` (the job under qemu-user as another CPU).

May import ``launcher.record`` (what a run leaves behind), ``launcher.errors``,
``launcher.proc``, and of the job process's code only its contracts (``launcher.job.determinism``,
``launcher.job.data``, ``launcher.job.interrupts``); ``launcher.docker`` only lazily, for
``runtime=docker``. Never ``verdict``, ``sweep`` or ``cli``.
"""
