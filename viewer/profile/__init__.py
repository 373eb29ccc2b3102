"""The profile of the selected sets and what is computed from it: located
and named stacks, grouped into frames as a view says, processed by the
filters, the call graph; export tables and comparisons."""
