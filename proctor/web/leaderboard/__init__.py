"""The public leaderboard: one row per policy of a released campaign, read
from its stored snapshot, with the protocol above it and the pairwise
verdicts below. Also the shared chart library (``static/charts.js``)."""
