"""Serving a policy over each wire: the demo's scripted policies and the
tests' servers, in a background thread (``background.py``)."""
