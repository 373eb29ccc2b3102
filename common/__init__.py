"""What q-syscollect, q-view and q-push share that is no file format: their
command lines' help layout and version, cache directories, a hash."""
