"""A run that travels: one file holding a sealed run and everything its replay needs.

Owns the archive: its manifest and the checks of its members (``manifest``, pure), writing it
(``pack``, with the environment's wheels from ``wheels``) and reading it, as input from anyone
(``unpack``). ``launch pack``, ``launch unpack``, ``launch verify FILE`` and ``launch replay
FILE`` use it.

May import only ``launcher.record``, ``launcher.errors``, ``launcher.proc`` and ``launcher.version``.
"""
