"""The helper module that with_helper.py imports."""

LEARNING_RATE = 0.1
