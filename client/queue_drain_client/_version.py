"""The client's version (the package's, in client/pyproject.toml)."""

from __future__ import annotations

__version__ = "0.2.0"
