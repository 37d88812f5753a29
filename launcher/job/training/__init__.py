"""What the job trained, and its state.

Owns the observation of every Keras ``fit`` and optimizer step of unmodified code
(``observer``), the resumable state of a fit (``fitstate``), writing epoch checkpoints
(``checkpoints``), TF1 graphs and sessions (``tf1``), the step trace's recorders
(``trace``), and where tf_keras (Keras 2, ``TF_USE_LEGACY_KERAS=1``) differs from Keras 3
(``legacy``).

Runs in the job process: imports only ``launcher.record``, ``launcher.errors`` and the
job's own ``interrupts``.
"""
