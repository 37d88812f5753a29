"""What the job used, observed without the job's help.

Owns the files the job read (``reads``: an audit hook, the readers of TensorFlow and h5py;
``fswatch``: native opens at the OS level), the environment variables its own code read
(``envreads``), the packages it imported (``imports``), the seeds it set (``seeding``), and
who is calling (``callers``). ``observers`` is the front: it installs them in their one
order and gathers their facts for the fingerprint.

Runs in the job process: imports only ``launcher.record`` and ``launcher.errors``.
"""
