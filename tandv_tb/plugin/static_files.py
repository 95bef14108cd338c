"""The frontend bundle in ``tandv_tb/static/``, served with a path-traversal guard."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from tensorboard.errors import NotFoundError
from werkzeug.security import safe_join

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}


def static_file(relative: str, root: Path = STATIC_DIR) -> tuple[bytes, str]:
    """``(content, content type)`` of a file under ``root``; 404 for anything that is not a
    plain file inside it (``..``, absolute paths, backslashes, NUL, symlinks leaving it)."""
    if (
        not relative
        or "\\" in relative
        or "\x00" in relative
        or relative.startswith("/")
        or ".." in relative.split("/")
    ):
        raise NotFoundError(f"no static file {relative!r}")
    joined = safe_join(str(root), posixpath.normpath(relative))
    if joined is None:
        raise NotFoundError(f"no static file {relative!r}")
    real_root = os.path.realpath(root)
    real = os.path.realpath(joined)
    if os.path.commonpath([real_root, real]) != real_root or not os.path.isfile(real):
        raise NotFoundError(f"no static file {relative!r}")
    content_type = CONTENT_TYPES.get(Path(real).suffix.lower(), "application/octet-stream")
    with open(real, "rb") as file:
        return file.read(), content_type
