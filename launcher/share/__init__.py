"""A run that travels: one file holding a sealed run and everything its replay needs.

Owns the archive: its index (``launch-archive.json``, not the seal: that is the run's
``manifest.json``) and the checks of its members (``archive_index``, pure), writing it
(``pack``, with the wheels of the run's Python environment from ``wheels``) and reading it, as input from anyone
(``unpack``). ``launch pack``, ``launch unpack``, ``launch verify FILE`` and ``launch replay
FILE`` use it.

May import only ``launcher.record``, ``launcher.errors``, ``launcher.proc`` and ``launcher.version``.
"""
