"""Format names to format values: ``check_formats`` (what ``formats=`` takes) and
``as_format`` (one name, as a route or a file gives it) are the one reading of a name."""

from __future__ import annotations

import functools

from tandv_tb.formats.base import BLOCKS, CASTS, Format
from tandv_tb.formats.blocks import BlockFormat, block_format, is_block_format
from tandv_tb.formats.element import ElementFormat, element_format


def as_format(name: object) -> Format:
    """The format named ``name``: a block-scaled one (``blocks``) or an element format (any
    name ``ml_dtypes.finfo`` accepts), by its canonical name. ``ValueError`` for an unknown
    name, ``TypeError`` for what is no name."""
    if isinstance(name, Format):
        return name
    if is_block_format(name):
        return block_format(name)
    return element_format(name)


def check_formats(formats: object) -> tuple[Format, ...]:
    """The formats given to ``formats=`` (one name or a sequence): element formats, then
    block formats, each in the order given, repeats dropped. ``ValueError`` naming the
    first unknown one."""
    if isinstance(formats, str):
        formats = (formats,)
    try:
        names = tuple(formats)
    except TypeError:
        raise TypeError(
            f"formats must be a format name or a sequence of them, got {formats!r}"
        ) from None
    return _canonical_formats(names)


@functools.cache
def _canonical_formats(names: tuple) -> tuple[Format, ...]:
    elements, blocks = split_formats(tuple(dict.fromkeys(map(as_format, names))))
    return elements + blocks


def split_formats(
    formats: tuple[Format, ...],
) -> tuple[tuple[ElementFormat, ...], tuple[BlockFormat, ...]]:
    """(element formats, block formats) of ``formats``, each in the order given: the one
    place that parts formats by kind, for the layouts that keep them apart (the engine's
    vectors, a record's sections)."""
    by_section: dict[str, list[Format]] = {CASTS: [], BLOCKS: []}
    for value in map(as_format, formats):
        by_section[value.section].append(value)
    return tuple(by_section[CASTS]), tuple(by_section[BLOCKS])
