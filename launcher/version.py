"""The launcher's version: a leaf module, so every stage can read it without importing the user API."""

__version__ = "0.1.0"
