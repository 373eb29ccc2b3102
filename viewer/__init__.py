"""q-view: gprof-style flat profiles and call graphs from a `.q` directory."""
