"""Shared test setup: tests/ on sys.path for the helper modules (qsynth)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
