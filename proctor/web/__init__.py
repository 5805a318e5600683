"""The FastAPI app: leaderboard, run explorer, consoles, review UI, JSON API."""
