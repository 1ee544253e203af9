"""The ``load`` command(s)."""
