"""``accelscope roofline``: request + workflow, terminal view, HTML report."""
