"""What a run ran on and what it used: the fingerprint and the comparability key.

Owns the probes of the machine and the software (``probes``, with ``cpuid`` and ``nvml``), the
environment allowlist that keeps secrets out (``environment``), where a path belongs
(``places``), a distribution's identity (``distributions``), what the job imported, loaded and
read (``usage``), the fingerprint assembled from them (``fingerprint``) and the one definition
of the comparability key (``key``).

Used by both processes. Imports only ``launcher.record``'s leaves and ``launcher.record.store``,
``launcher.errors``, ``launcher.proc`` and ``launcher.version``.
"""
