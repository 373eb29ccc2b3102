"""The JIT files a `.q` keeps: jitdumps (perf's format) and the placements of
JIT code the collector writes in their place."""
