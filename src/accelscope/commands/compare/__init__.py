"""``accelscope compare`` (stored runs, side by side, with statistics) and ``accelscope gate``
(baseline and candidate re-measured alternately, with a pass/regression/inconclusive exit)."""
