"""The files of the objects a `.q` keeps copies of: ELF headers, and the
call-frame information in .eh_frame and .debug_frame (both sides read it)."""
