"""``accelscope doctor``: request + workflow, terminal view, HTML report."""
