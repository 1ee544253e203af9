"""Is it really faster or slower? Two runs (or two sets of runs) compared configuration by
configuration with intervals, p-values and a multiple-comparison correction
(:mod:`accelscope.compare.analysis`); the interleaved regression gate's decision
(:mod:`accelscope.compare.gate`)."""
