"""perf_events itself: the attribute ABI, the syscalls, the mmap'd rings, the
event sources and the machine's architecture facts."""
