"""What the job trained, and its state: every Keras ``fit`` and optimizer step of unmodified code
(``observer``), the resumable state of a fit (``fitstate``), epoch checkpoints
(``checkpoints``), TF1 graphs and sessions (``tf1``), and the step trace's recorders (``trace``).
"""
