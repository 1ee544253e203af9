"""The ``plan`` command(s)."""
