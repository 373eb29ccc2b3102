"""A sample's user frames: DWARF unwinding through the unwind package, and the code JIT compilers describe (perf maps, jitdumps)."""
