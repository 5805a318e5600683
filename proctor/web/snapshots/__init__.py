"""Leaderboard snapshots: computed by the analysis layer
(``proctor.analysis.store.build_snapshot``), stored as ``AnalysisSnapshot`` rows,
read by the public pages.

* ``proctor.analysis.store.recompute(session, campaign_id=…)`` (the computation
  lives in the analysis layer; this package schedules it and reads its
  rows) — score a campaign under every label stream now, in the caller's
  transaction (skips a stream whose data, code and protocol are unchanged
  since its latest snapshot).
* ``worker.recompute_after_commit(session, campaign_id=…)`` — the hook for
  the review flow: once the caller's transaction commits, the background
  worker of the app the session belongs to recomputes that campaign
  (coalescing repeated requests).
* ``AppState.snapshot_worker.request(campaign_id)`` — queue one directly on
  the app's worker (each app has its own; ``proctor.web.state``).
"""
