"""Untrusted submitter code, run with no network and hard limits (see
``proctor/runner/README.md``): ``start(spec)`` gives a ``Sandboxed``."""

from proctor.runner.sandbox.process import Sandbox, start

__all__ = ["Sandbox", "start"]
