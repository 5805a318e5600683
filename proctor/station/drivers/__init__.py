"""Hardware drivers. The only place hardware libraries are imported.

One abstract base per role (``arm/base.py``, ``gripper/base.py``,
``camera/base.py``), one module per implementation, each with its config
dataclass, found through the registry in ``registry.py`` — never an
if/elif chain.
"""
