"""The conformance checks a policy endpoint must pass before it is admitted
(``check.py`` runs them; ``state.py`` is what each check reads and writes)."""
