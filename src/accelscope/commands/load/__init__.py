"""``accelscope load``: request + workflow, terminal view, HTML report."""
