"""One run, from a composed config to a sealed result.

Owns the stages of a run: ``config`` (compose, check, resolve, hash), ``job`` (the
pipeline: resolve, create the run directory, plan, fingerprint, run, seal, index),
``determinism`` (the bootstrap as a pure plan, applied and read back in the job
process), ``bootstrap`` (the job process), ``observe`` (what an unmodified training
script trained, without its help), ``reads`` (which files and directories the job
opened or listed), ``envreads`` (which environment variables its own code read), ``seeding`` (the seeds
its own code set),
``tf1`` (TF1 graphs and sessions under the bootstrap), ``runtime``
(where the job process runs), ``gpus`` (a GPU request checked before any run exists),
``trace`` (the step trace), ``checkpoints`` and ``resume``, ``keep`` (the code and data a run
keeps in the store: at each checkpoint and at its end), ``interrupts`` (Ctrl-C and
SIGTERM at a safe point), ``rebuild`` (a run's recorded environment, rebuilt), ``precheck`` (a stored
run's key against this environment), ``userapi`` (the helpers user code may call),
``data`` and ``tasks`` (the built-in mnist task, user code).

May import ``launcher.record`` (what a run leaves behind), ``launcher.errors`` and
``launcher.proc``; ``launcher.docker`` only lazily, for ``runtime=docker``. Never
``verdict``, ``sweep`` or ``cli``.
"""
