"""What runs inside the job process: ``python -m launcher.bootstrap RUN_DIR``, locally or in a container.

The launcher (``launcher.run``) starts this process and reads what it leaves in the run
directory; the two share no state but files. Owns:

- ``bootstrap``: the job's sequence of steps, from the plan applied to the result written;
- ``determinism``: the bootstrap as a plan (made by the launcher, pure) applied and read back here;
- ``observe/``: what the job used: files read, environment variables, modules, seeds;
- ``training/``: what the job trained and its state: fits and optimizer steps, checkpoints,
  TF1 sessions, the step trace;
- ``tasks/``: the built-in mnist task and the user's code (custom, script, notebook);
- ``data`` (the MNIST sources), ``interrupts`` (a stop at a safe point), ``notebook``,
  ``userapi`` (what user code may call).

Imports only ``launcher.record``, ``launcher.errors``, ``launcher.version`` and
``launcher.console``: never the launcher's side. The launcher imports its pure contracts
only: ``determinism``, ``data`` and ``interrupts``' signal names.
"""
