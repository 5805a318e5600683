"""Pages that other issues will build, said plainly until they land."""
