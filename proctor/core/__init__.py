"""The kernel: settings, database, artifact store, domain types, errors,
audit, the CLI context. It imports nothing of the project outside itself
(docs/architecture.md, "Layers")."""
