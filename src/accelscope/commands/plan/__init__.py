"""``accelscope plan``: request + workflow, terminal view, HTML report."""
