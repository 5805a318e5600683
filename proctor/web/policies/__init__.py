"""A policy's page within a campaign's leaderboard: its time-to-success CDFs
against the human reference (or another policy), P-P and Q-Q plots,
per-object scores, the UPH vs MTBF/A trade-off as τ sweeps, results per
spatial configuration and object tag, its failure modes, and its episodes."""
