"""Checkpoint runners: what submitters upload, served sandboxed on a runner host.

``manifest``/``archive`` are the checkpoint's format (checked at upload by the
web app, again here before anything runs); ``frameworks`` says per framework
how to build an environment and start a server; ``envs`` builds and reuses
the environments; ``sandbox`` runs untrusted code with no network and hard
limits; ``queue`` and ``worker`` are the runner host (``proctor runner worker``);
``serve`` is ``proctor runner serve`` for a submitter's own machine.
See ``proctor/runner/README.md``.
"""
