"""The ``doctor`` command(s)."""
