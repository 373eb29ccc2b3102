"""Bytes of the rings into records, and the one table that routes each record
type to its decoder and its handler."""
