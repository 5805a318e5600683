"""The methodology of docs/methods.md as pure functions over arrays.

Pure modules take arrays or episode records and return frozen result
dataclasses; ``interchange`` (files), ``store`` (the database), ``plots``
(matplotlib) and ``cli`` are the only ones that touch the outside world.
"""

# bumped when a change alters any number the analysis produces
# 4: this round of the statistics review: expanded-percentile intervals for
# RMST and HRT and the coverage warning, the studentized tests' wild-bootstrap
# reference, per-object tests, Barnard, rankings, object-stratified sentinels,
# the Bayesian-bootstrap completion, the sequential direction and pairing by design
ANALYSIS_VERSION = "4"  # 2: envelope interventions per episode; 3: latency
