"""What q-view reads: inputs (directories, .info names, PROG.info, tar
archives) and the selection, into task sets, each .info parsed once."""
