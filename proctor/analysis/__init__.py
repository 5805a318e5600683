"""The methodology of docs/methods.md as pure functions over arrays.

Pure modules take arrays or episode records and return frozen result
dataclasses; ``interchange`` (files), ``store`` (the database), ``plots``
(matplotlib) and ``cli`` are the only ones that touch the outside world.
"""

# bumped when a change alters any number the analysis produces
ANALYSIS_VERSION = "3"  # 2: envelope interventions per episode; 3: latency
