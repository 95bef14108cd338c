"""What to install where fsspec has no package for a URL's protocol: the extra of
tandv_tb that brings it (``pyproject.toml``), or the package fsspec names."""

from __future__ import annotations

#: The extras of tandv_tb that install a protocol's filesystem, by protocol.
EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "abfs": "azure",
    "az": "azure",
}


def missing_package(protocol: str, error: ImportError) -> str:
    """``error`` (fsspec's words, else the import's own) and what to install, in one
    phrase: ``"Please install gcsfs to access Google Storage (pip install
    'tandv_tb[gcs]' or gcsfs)"``."""
    from fsspec.registry import known_implementations

    said = str(error)
    if said in ("", "None") and error.__cause__ is not None:  # fsspec gave no words
        said = str(error.__cause__)
    module = known_implementations.get(protocol, {}).get("class", "").partition(".")[0]
    extra = EXTRAS.get(protocol)
    if extra is not None:
        how = f"pip install 'tandv_tb[{extra}]' or {module or 'its package'}"
    elif module:
        how = f"install the package that provides {module!r}"
    else:
        how = f"install the fsspec package for {protocol}://"
    return f"{said} ({how})"
