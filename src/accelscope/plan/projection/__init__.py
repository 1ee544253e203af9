"""Projections to hardware not at hand: a physical floor times an efficiency learned from
published, measured results, as a point and an 80 % prediction interval.

- :mod:`.published`: the published table (MLPerf Inference v4.0-v5.0), each row cited;
- :mod:`.workloads`: the benchmarks, their workload classes and a sample's work;
- :mod:`.efficiency`: the mixed model of log efficiency and its intervals;
- :mod:`.calibration`: the table set against the datasheets, and the fitted model;
- :mod:`.validation`: the leave-one-out that checks errors and interval coverage.
- :mod:`.static`: projections from a model's counted work with no measured run, their
  interval widened as that leave-one-out measured.
- :mod:`.tighten`: the user's own measured runs added to the model as rows of their family
  (measure, then tighten), and the leave-one-out that checks the narrowed intervals.
- :mod:`.llm_serving`: LLM serving (TP degree, concurrency, TPOT, TTFT, tokens/s) at an SLO,
  calibrated on MLPerf's LLM Server rows (Llama-2-70B, Mixtral-8x7B, Llama-3.1-405B), and its
  leave-one-out over systems.
"""
