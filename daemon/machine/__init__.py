"""What the collector knows of the machine's tasks: the host seam (the only
reader of /proc), the records synthesized from it, and the task table
records build."""
