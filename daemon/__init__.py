"""q-syscollect: the system-wide, per-CPU collector on perf_events."""
