"""The home page."""
