"""What q-view reads: inputs and selections into task sets (each .info parsed once), and their data files into stacks of locations."""
