"""The values q-view's layers pass each other: frames, located addresses,
profiles, call graphs, options; errors and escaping. Imports nothing of
the viewer."""
