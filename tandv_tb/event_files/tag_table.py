"""What is known of one run's numerics tags while its event files are read."""

from __future__ import annotations

from tandv_tb.event_files.metadata import NotNumerics, TagInfo, parse_plugin_metadata, plugin_kind


class TagTable:
    """What is known of one run's numerics tags, across its files and reads: each tag's
    metadata comes from its first record only (as TensorBoard keeps it)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.contents: list[bytes] = []  # each tag's plugin content, as stored
        self.infos: list[TagInfo | None] = []  # None: refused (``errors``) or ``kinds``
        self.errors: dict[str, str] = {}
        self.kinds: dict[str, str | None] = {}  # tags of this plugin that hold no numerics
        self.scalar_tags: set[str] = set()  # tags of TensorBoard's scalars plugin
        self._index: dict[str, int] = {}
        self._reported: set[str] = set()

    def __len__(self) -> int:
        return len(self.names)

    def index(self, tag: str) -> int | None:
        return self._index.get(tag)

    def add(self, tag: str, content: bytes) -> int:
        """Register a tag from its metadata's plugin content (a refused one gets None)."""
        found = self._index.get(tag)
        if found is not None:
            return found
        try:
            info: TagInfo | None = parse_plugin_metadata(content)
        except NotNumerics:
            info = None
            self.kinds[tag] = plugin_kind(content)
        except ValueError as error:  # UnsupportedVersion included
            info = None
            self.errors[tag] = str(error)
        self._index[tag] = len(self.names)
        self.names.append(tag)
        self.contents.append(bytes(content))
        self.infos.append(info)
        return self._index[tag]

    def update_from(self, copy: TagTable) -> None:
        """Become ``copy``, a copy of this table that read on (in a reader process)."""
        self.__dict__.update(copy.__dict__)

    def refuse_once(self, tag: str) -> bool:
        """True the first time a refused tag is met (so that it is described once)."""
        if tag in self._reported:
            return False
        self._reported.add(tag)
        return True
