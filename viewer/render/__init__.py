"""Renderers: ``render(profile, out)`` writes one report format to a text stream."""
