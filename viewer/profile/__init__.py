"""From named stacks to the call graph: grouping by --by, merging sets, processors and filters, call-graph arithmetic; comparisons and exports."""
