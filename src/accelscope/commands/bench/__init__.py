"""``accelscope bench``: request + workflow, terminal view, HTML report."""
