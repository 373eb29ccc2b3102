"""Names for locations: symbol tables of the object copies, debug files,
kallsyms, JIT maps and dumps, demangling, the symbol cache."""
