"""The methodology of METHODS.md as pure functions over arrays."""
