"""The torch, jax and flax releases tandv_tb supports, and how it says what one lacks.

- **Floors** (``FLOORS``): the oldest release of each framework that `make compat` tests
  (compat.mk installs exactly these; pyproject.toml states them;
  tests/project/test_framework_versions.py keeps the three equal). docs/support.md says why
  each is where it is. ``require`` is the one place a framework's version is compared with
  its floor: ``import tandv_tb.torch`` / ``tandv_tb.jax`` below it raises an ``ImportError``
  naming both, before any code that would fail deep inside on an older release runs.
- **What a release in range lacks** is found by feature detection (``hasattr``, a try at
  import) where the feature is used, never by comparing version strings; ``lacking`` says
  so once per feature, with a ``NewerReleaseWarning`` that names what is missing, what
  tandv_tb does instead and the release that brings it.
"""

from __future__ import annotations

import importlib.metadata
import warnings

from packaging.version import Version

#: The oldest release of each framework that is tested (compat.mk, pyproject.toml).
FLOORS = {"torch": "2.5.0", "jax": "0.7.0", "flax": "0.11.0"}


class NewerReleaseWarning(UserWarning):
    """A feature needs a newer release of a framework than the one installed; tandv_tb goes
    on without it (the message says what is not done, and which release brings it)."""


def installed(distribution: str) -> str | None:
    """The installed version of ``distribution``, read from its metadata (without importing
    it); None where it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def require(distribution: str) -> None:
    """Raise an ``ImportError`` naming the installed version and the floor where
    ``distribution`` is older than ``FLOORS`` allows.

    The release is compared, not the whole version: a pre-release or local build of the
    floor release (``2.5.0a0+git…`` in vendor images, ``2.5.0+cpu``) is that release."""
    version = installed(distribution)
    floor = FLOORS[distribution]
    if version is not None and Version(version).release < Version(floor).release:
        raise ImportError(
            f"tandv_tb needs {distribution} {floor} or later; {distribution} {version} is "
            f"installed (pip install -U '{distribution}>={floor}')"
        )


_said: set[str] = set()


def lacking(feature: str, release: str, instead: str, *, stacklevel: int = 3) -> None:
    """Say once per process that ``feature`` needs ``release`` (for example ``torch 2.13``),
    and what tandv_tb does ``instead``."""
    if feature in _said:
        return
    _said.add(feature)
    warnings.warn(
        f"tandv_tb: {feature} needs {release} or later; {instead}",
        NewerReleaseWarning,
        stacklevel=stacklevel,
    )
