"""Pieces shared by the test modules; ``REPO`` is the checkout's root."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
