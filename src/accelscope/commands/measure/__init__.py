"""``accelscope measure``: request + workflow, terminal view, HTML report."""
