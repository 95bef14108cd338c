"""The plugin's identity in TensorBoard: plugin name, per-tag metadata and its versioning.

TensorBoard keeps a tag's ``SummaryMetadata`` from the tag's *first* event only, so the
metadata holds only what is fixed for the tag's life: the tensor's name and type, the
module type, its order in the model, the element formats whose under/overflow is recorded
and the block-scaled formats recorded (``tandv_tb.formats``).
It is stored as compact JSON in ``plugin_data.content``::

    {"version": 2, "name": "layers.0.attn.wq", "tensor_type": "Activation",
     "module_type": "Linear", "order": 3, "formats": ["float8_e4m3fn"]}

A tag that records block formats lists them in ``"block_formats"`` and has version 3:
its steps' vectors end with a section for them (``tandv_tb.event_files.summary``), which a reader
of version 2 would not know to read, so it refuses the tag. Tags without block formats are
written as version 2, which every reader since reads.

Readers take the name and tensor type from here, never by parsing the tag string. A tag of
another kind (``"kind": "nonfinite"``, the non-finite watch's record, see
``tandv_tb.event_files.nonfinite_record``; ``"kind": "graph"``, the model's graph, see
``tandv_tb.event_files.graph_record``) is not a numerics tag: ``parse_plugin_metadata``
refuses it with ``NotNumerics``, which readers skip silently. The version says how each
step's tensor is stored (see ``tandv_tb.event_files.summary``): 1 as ``int64_val``, 2
(written since) as varint bytes, 3 as 2 with a block formats section; this version reads all
three, and refuses newer ones.
"""

from __future__ import annotations

import dataclasses
import json
import re

from tensorboard.compat.proto import summary_pb2

from tandv_tb.formats import BLOCKS, CASTS, BlockFormat, ElementFormat, Format, as_format

PLUGIN_NAME = "tandv"
#: The newest version this tandv_tb reads and writes (3: with block formats).
PLUGIN_DATA_VERSION = 3
#: The version written for tags without block formats (readable by older tandv_tb).
PLAIN_VERSION = 2
#: ``kind`` of the numerics tags (also implied by no ``kind``), of the watch's record and
#: of the model's graph (``tandv_tb.event_files.graph_record``).
NUMERICS_KIND = "numerics"
NONFINITE_KIND = "nonfinite"
GRAPH_KIND = "graph"

#: Stored dtypes, by code (the code is the index). Append-only: codes never change.
DTYPE_CODES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float8_e4m3b11fnuz",
    "float8_e3m4",
    "float8_e4m3",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
)

#: The contract's tensor types, in the order dashboards list them; ``Optimiser_State.<key>``
#: (any key without spaces or "/") follows them.
TENSOR_TYPES = ("Activation", "Gradient", "Input", "Input_Gradient", "Weight", "Weight_Gradient")
#: The groups the trackers tell apart, each a subset of ``TENSOR_TYPES``: a module's output
#: and the gradient reaching it, its input and the gradient of that (each pair the forward
#: type first); what a module's call gives (both pairs); what the forward pass gives.
MODULE_OUTPUT_TYPES = ("Activation", "Gradient")
MODULE_INPUT_TYPES = ("Input", "Input_Gradient")
MODULE_CALL_TYPES = MODULE_OUTPUT_TYPES + MODULE_INPUT_TYPES
FORWARD_TYPES = ("Activation", "Input")
#: The type of a forward tensor's gradient.
GRADIENT_TYPE = {"Activation": "Gradient", "Input": "Input_Gradient"}
#: What ``Optimiser_State.<key>`` begins with.
OPTIMISER_STATE_PREFIX = "Optimiser_State."
_OPTIMISER_STATE = re.compile(r"Optimiser_State\.[^\s/]+")


def tensor_type_key(tensor_type: str) -> tuple:
    """Display order of tensor types: ``TENSOR_TYPES`` in order, optimiser states next (by
    key), others last.

    Menus list the types by name, in the contract's order, where a reader looks a type up;
    execution order (``execution_key``) is for what happened first, as findings tell it."""
    if tensor_type in TENSOR_TYPES:
        return (0, TENSOR_TYPES.index(tensor_type), "")
    if tensor_type.startswith(OPTIMISER_STATE_PREFIX):
        return (1, 0, tensor_type)
    return (2, 0, tensor_type)


#: The phases of one training step, in execution order, and the tensor types met in each
#: (in the order met for one module): the forward pass (a module's input before its
#: output), the backward pass (the gradient of a module's output before that of its input),
#: then what is read at ``step()``: weight gradients, weights, optimizer state. Unknown
#: types come last.
_PHASES = {
    "Input": (0, 0),
    "Activation": (0, 1),
    "Gradient": (1, 0),
    "Input_Gradient": (1, 1),
    "Weight_Gradient": (2, 0),
    "Weight": (3, 0),
}
_BACKWARD_PHASE, _OPTIMISER_PHASE, _UNKNOWN_PHASE = 1, 4, 5


def execution_phase(tensor_type: str) -> int:
    """The phase of one training step in which tensors of ``tensor_type`` are met (0:
    forward, 1: backward, 2-4: read at ``step()``, 5: unknown)."""
    if tensor_type in _PHASES:
        return _PHASES[tensor_type][0]
    if tensor_type.startswith(OPTIMISER_STATE_PREFIX):
        return _OPTIMISER_PHASE
    return _UNKNOWN_PHASE


def execution_key(tensor_type: str, order: int, name: str) -> tuple:
    """Where a tensor comes in one training step: inputs and activations in forward order
    (a module's input before its output), gradients in backward order (descending
    ``order``, the gradient of a module's output before that of its input), then weight
    gradients, weights and optimizer state as read at ``step()``; unknown types last."""
    phase = execution_phase(tensor_type)
    if tensor_type in _PHASES:
        within = _PHASES[tensor_type][1]
        return (phase, -order if phase == _BACKWARD_PHASE else order, within, name)
    return (phase, order, 0, tensor_type + "\0" + name)


class UnsupportedVersion(ValueError):
    """The data were written by a newer tandv_tb than the one reading them."""


class NotNumerics(ValueError):
    """A tag of this plugin that holds no numerics (the non-finite watch's record)."""


def is_tensor_type(tensor_type: object) -> bool:
    """Whether ``tensor_type`` is one of the contract's tensor types."""
    return isinstance(tensor_type, str) and (
        tensor_type in TENSOR_TYPES or _OPTIMISER_STATE.fullmatch(tensor_type) is not None
    )


def check_tensor_type(tensor_type: object) -> str:
    """``tensor_type`` itself, or ``ValueError`` naming the allowed types."""
    if not is_tensor_type(tensor_type):
        allowed = ", ".join(TENSOR_TYPES)
        raise ValueError(
            f"unknown tensor_type {tensor_type!r}: expected one of {allowed} "
            "or 'Optimiser_State.<key>' (e.g. 'Optimiser_State.exp_avg')"
        )
    return tensor_type


def tag_name(tensor_type: str, name: str) -> str:
    """The TensorBoard tag of a tracked tensor (for display only, never parsed)."""
    return f"{PLUGIN_NAME}/{tensor_type}/{name}"


@dataclasses.dataclass(frozen=True)
class TagInfo:
    """What is fixed for a tag's life, as stored in its plugin metadata. The formats
    recorded are kept as a record keeps them, in two sections: ``formats`` (element
    formats: casts) and ``block_formats``; given as names, they become format values
    (``ValueError`` for an unknown name or one of the other section)."""

    name: str
    tensor_type: str
    module_type: str = ""
    order: int = 0
    formats: tuple[ElementFormat, ...] = ()
    block_formats: tuple[BlockFormat, ...] = ()
    #: The version it was read with (informational: a tag is the same at any version).
    version: int = dataclasses.field(default=PLUGIN_DATA_VERSION, compare=False)

    def __post_init__(self) -> None:
        for field, section in (("formats", CASTS), ("block_formats", BLOCKS)):
            values = tuple(map(as_format, getattr(self, field)))
            wrong = [f for f in values if f.section != section]
            if wrong:
                raise ValueError(f"{field} cannot hold {', '.join(wrong)}")
            object.__setattr__(self, field, values)

    @property
    def tag(self) -> str:
        return tag_name(self.tensor_type, self.name)

    @property
    def recorded(self) -> tuple[Format, ...]:
        """Every format the tag records: its element formats, then its block formats."""
        return (*self.formats, *self.block_formats)

    def in_section(self, section: str) -> tuple[Format, ...]:
        """The formats of one section of the tag's records (``CASTS``: ``formats``;
        ``BLOCKS``: ``block_formats``)."""
        return self.block_formats if section == BLOCKS else self.formats

    def position(self, format: Format) -> int | None:
        """Where ``format`` lies in its section of the tag's records (None: not recorded)."""
        listed = self.in_section(format.section)
        return listed.index(format) if format in listed else None

    def to_metadata(self) -> summary_pb2.SummaryMetadata:
        return create_summary_metadata(
            self.name,
            self.tensor_type,
            self.module_type,
            self.order,
            self.formats,
            self.block_formats,
        )


def create_summary_metadata(
    name: str,
    tensor_type: str,
    module_type: str = "",
    order: int = 0,
    formats: tuple[str, ...] | list[str] = (),
    block_formats: tuple[str, ...] | list[str] = (),
) -> summary_pb2.SummaryMetadata:
    """The ``SummaryMetadata`` of one numerics tag (``DATA_CLASS_TENSOR``): version 3
    where it records block formats, else 2."""
    content = {
        "version": PLUGIN_DATA_VERSION if block_formats else PLAIN_VERSION,
        "name": name,
        "tensor_type": tensor_type,
        "module_type": module_type,
        "order": int(order),
        "formats": list(formats),
    }
    if block_formats:
        content["block_formats"] = list(block_formats)
    return plugin_metadata(content)


def plugin_metadata(content: dict) -> summary_pb2.SummaryMetadata:
    """The ``SummaryMetadata`` of a tag of this plugin (``DATA_CLASS_TENSOR``), ``content``
    as compact JSON: numerics tags and the records of other kinds alike."""
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME,
            content=json.dumps(content, separators=(",", ":")).encode("utf-8"),
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


_FIELDS = {"name": str, "tensor_type": str, "module_type": str, "order": int}


def _content_json(content: bytes) -> object:
    try:
        return json.loads(bytes(content).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"malformed {PLUGIN_NAME} plugin metadata: {error}") from None
    except RecursionError:  # nested deeper than the parser goes: no metadata of ours
        raise ValueError(f"malformed {PLUGIN_NAME} plugin metadata: nested too deeply") from None


def plugin_content(content: bytes) -> dict:
    """A tag's plugin content as the JSON object it must be (``ValueError`` otherwise)."""
    data = _content_json(content)
    if not isinstance(data, dict):
        raise ValueError(f"malformed {PLUGIN_NAME} plugin metadata: not a JSON object")
    return data


def plugin_version(data: dict, newest: int, written: str) -> int:
    """The ``version`` of a plugin content: ``ValueError`` for a malformed one,
    ``UnsupportedVersion`` for one above ``newest`` (``written``: what was written,
    "these numerics were")."""
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"malformed {PLUGIN_NAME} plugin metadata: bad version {version!r}")
    if version > newest:
        raise UnsupportedVersion(
            f"{written} written with plugin data version {version}, but this tandv_tb "
            f"reads versions up to {newest}: upgrade tandv_tb"
        )
    return version


def plugin_kind(content: bytes) -> str | None:
    """The ``kind`` of a tag's plugin content (``NUMERICS_KIND`` where it names none), or
    None for content that is not a JSON object."""
    try:
        data = _content_json(content)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    kind = data.get("kind", NUMERICS_KIND)
    return kind if isinstance(kind, str) else None


def parse_plugin_metadata(content: bytes) -> TagInfo:
    """Decode ``plugin_data.content``; ``UnsupportedVersion`` for data of a newer version,
    ``NotNumerics`` for a tag of another kind, ``ValueError`` for anything malformed."""
    data = plugin_content(content)
    kind = data.get("kind", NUMERICS_KIND)
    if kind != NUMERICS_KIND:
        raise NotNumerics(f"a {PLUGIN_NAME} tag of kind {kind!r}, not numerics")
    version = plugin_version(data, PLUGIN_DATA_VERSION, "these numerics were")
    for field, kind in _FIELDS.items():
        value = data.get(field)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(
                f"malformed {PLUGIN_NAME} plugin metadata: {field!r} should be a "
                f"{kind.__name__}, got {value!r}"
            )
    formats = data.get("formats", [])
    if not isinstance(formats, list) or not all(isinstance(f, str) for f in formats):
        raise ValueError(f"malformed {PLUGIN_NAME} plugin metadata: bad formats {formats!r}")
    block_formats = data.get("block_formats", []) if version >= 3 else []
    if not isinstance(block_formats, list) or not all(isinstance(f, str) for f in block_formats):
        raise ValueError(
            f"malformed {PLUGIN_NAME} plugin metadata: bad block_formats {block_formats!r}"
        )
    try:
        return TagInfo(
            name=data["name"],
            tensor_type=data["tensor_type"],
            module_type=data["module_type"],
            order=data["order"],
            formats=tuple(formats),
            block_formats=tuple(block_formats),
            version=version,
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"malformed {PLUGIN_NAME} plugin metadata: {error}") from None
