"""The package's version: a leaf, imported by whatever needs it (nothing else here)."""

__version__ = "0.1.0"
