"""Logdir URLs whose fsspec filesystem cannot be made, for the tests: registered in this
process by ``register``, and in a process the tests start (a ``tensorboard``, the command
line) through ``site_environment``.

- ``refusing://``: a real fsspec filesystem whose constructor raises, as an ``s3fs`` too
  old for an option does (``REFUSAL``);
- ``nosuchfs://``: a protocol registered to a module that does not exist, as a protocol
  whose package is not installed is.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import fsspec
from fsspec.spec import AbstractFileSystem

from tests.helpers import REPO

REFUSING = "refusing"
ABSENT = "nosuchfs"
ABSENT_MODULE = "tandv_tb_absent_filesystem"
#: What ``RefusingFileSystem`` raises.
REFUSAL = "AioSession.__init__() got an unexpected keyword argument 'endpoint_url'"
#: A folder whose ``sitecustomize`` calls ``register`` in any Python started with it on
#: its ``PYTHONPATH``.
SITE = Path(__file__).with_name("fault_site")


class RefusingFileSystem(AbstractFileSystem):
    """A filesystem that refuses to be made."""

    protocol = REFUSING

    def __init__(self, *args, **kwargs):
        raise TypeError(REFUSAL)


def register() -> None:
    fsspec.register_implementation(REFUSING, RefusingFileSystem, clobber=True)
    fsspec.register_implementation(ABSENT, f"{ABSENT_MODULE}.FileSystem", clobber=True)


def site_environment() -> dict[str, str]:
    """``PYTHONPATH`` for a process that has the filesystems registered (and finds this
    checkout's ``tests``)."""
    paths = [str(SITE), os.environ.get("PYTHONPATH", ""), str(REPO)]
    return {"PYTHONPATH": os.pathsep.join(path for path in paths if path)}


def unopenable() -> list[tuple[str, str]]:
    """``(URL, what its message names)`` of logdirs whose filesystem cannot be made."""
    found = [
        (f"{ABSENT}://bucket/logs", f"install the package that provides '{ABSENT_MODULE}'"),
        (f"{REFUSING}://bucket/logs", f"TypeError: {REFUSAL}"),
    ]
    if importlib.util.find_spec("gcsfs") is None:  # as on this project's machines
        found.insert(0, ("gs://bucket/logs", "pip install 'tandv_tb[gcs]' or gcsfs"))
    return found
