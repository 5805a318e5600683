"""Proctor: blinded, statistically honest evaluation of robot policies."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("proctor")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
