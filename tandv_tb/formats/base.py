"""``Format``: what every kind of format says of itself, so that no layer tests the kind.

A format is a value made once (``names.check_formats``, ``names.as_format``) and passed
around: the trackers, the writer, the engine, the store, the diagnosis and the plugin ask it
where its counts lie and what can be done with them. It *is* its canonical name (a ``str``):
it goes wherever a name went (dict keys, JSON, SQL parameters, messages, comparisons with a
name a user typed), and a name read back from a file becomes the same value again.
"""

from __future__ import annotations

from typing import ClassVar

#: The sections of a record (and tables of the store) that hold a format's counts.
CASTS, BLOCKS = "casts", "blocks"
#: The metrics of the routes that every format offers: its exact (or estimated) casts.
CAST_METRICS = ("underflow_count", "overflow_count", "underflow_fraction", "overflow_fraction")


class Format(str):
    """A number format: its canonical name and its constants. Immutable and hashable (as
    its name); each kind (``ElementFormat``, ``BlockFormat``) sets what follows."""

    #: The record's section, and the store's table, holding its counts (``CASTS``,
    #: ``BLOCKS``).
    section: ClassVar[str]
    #: What each record holds for it there, in stored order (the store's columns).
    columns: ClassVar[tuple[str, ...]]
    #: The metrics of the heatmap and series routes it offers.
    metrics: ClassVar[tuple[str, ...]]
    #: Whether its casts can be estimated from an exponent histogram where it was not
    #: recorded (a block format's cannot: the blocks are gone).
    estimable: ClassVar[bool]
    #: Whether it picks its own scales, block by block (a per-tensor scale is no remedy).
    scales_itself: ClassVar[bool]
    #: Whether a value past its largest one saturates there (rather than becoming Inf or
    #: NaN): a bounded loss.
    saturates: ClassVar[bool]

    @classmethod
    def _made(cls, name: str, **constants: object) -> Format:
        """The value named ``name`` holding ``constants`` (its kind's ``of`` checks them)."""
        value = str.__new__(cls, name)
        value.__dict__.update(constants)
        return value

    @classmethod
    def of(cls, name: str) -> Format:
        """The format of this kind named ``name`` (``ValueError`` for another name)."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        return str(self)

    def column_key(self, column: str) -> str:
        """The key of one of its ``columns`` among other columns (a series' counts and
        statistics): ``column:format``. Built here alone; nothing parses it."""
        return f"{column}:{self}"

    def __reduce__(self):  # pickled by name (the store's reader process sends tag infos)
        return type(self).of, (str(self),)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a format is immutable: cannot set {name!r} of {self!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a format is immutable: cannot delete {name!r} of {self!r}")
