"""The ``ceilings`` and ``roofline`` command(s)."""
