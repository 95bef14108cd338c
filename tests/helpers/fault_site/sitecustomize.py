"""Imported at the start of a Python process with this folder on its ``PYTHONPATH``: the
filesystems of ``tests/helpers/fault_filesystems.py`` are registered there."""

from tests.helpers.fault_filesystems import register

register()
