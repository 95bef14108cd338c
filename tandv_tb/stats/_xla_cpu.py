"""The CPU kernel inside ``jax.jit`` programs: an XLA FFI call that runs ``_cpu_kernel``.

On the CPU the arrays of a jitted program are in host memory already, so the compiled
(numba) kernel can read them in place: an XLA custom call (typed FFI; one target per
compute dtype, ``tandv_stats_float32`` and ``tandv_stats_float64``) whose handler is a
numba ``cfunc``. It runs in the compiled program like any other operation: no host
callback, no copy. Alone it is up to 1.6x faster than the branch-free array kernel under
XLA's CPU backend (whose histogram is a scalar scatter); inside a training program the
tracked program's extra time fell to a third (bench/RESULTS.md).

The handler reads XLA's C structures (``xla/ffi/api/c_api.h``, API 0.x, as shipped in
``jax.ffi.include_dir()``) as 64-bit words at fixed offsets: the one way for a numba
``cfunc`` to be an FFI handler without a C++ build. The fallback that needs none of it, the
array kernel, left the tracked program's extra cost at 0.40-0.57x of plain training, against
0.14-0.15x with this call (bench/RESULTS.md, JAX tracker). It reads the call
frame's stage, arguments and results, and each buffer's dtype, data and dims. It answers
XLA's metadata query with the API version it was written against; registration first
checks the major version of jax's headers and, if it differs, keeps the array kernel (with
a warning). The element formats' thresholds, the block formats' table and the histogram's
range and the rows' length come in as three small constant operands. The outputs
are the array kernel's: the counts vector (int32, or int64 under ``jax_enable_x64``) and
the moments vector (float32 or float64), so everything downstream is the same. XLA runs
its CPU threads in flush-to-zero mode; the kernel reads subnormals through their bit
patterns and the float32 outputs are rounded with integer arithmetic, so none is lost.
"""

from __future__ import annotations

import functools
import math
import warnings

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from tandv_tb import versions
from tandv_tb.formats import info
from tandv_tb.formats.kernel_tables import BLOCK_ROW, THRESHOLD_ROW, block_table, threshold_bits
from tandv_tb.stats import _cpu_kernel
from tandv_tb.stats.tensor_stats import engine_layout

#: The FFI API version the handler implements (``XLA_FFI_API_MAJOR``/``MINOR``).
_API_MAJOR, _API_MINOR = 0, 3
#: Enumerations of ``c_api.h``: XLA_FFI_Extension_Metadata, XLA_FFI_ExecutionStage_EXECUTE,
#: XLA_FFI_DataType_S64 and _F64.
_METADATA_EXTENSION, _EXECUTE = 1, 3
_S64, _F64 = 5, 12
#: Where the handler reads, in 64-bit words from a struct's start (``c_api.h``; checked
#: against the installed header by tests/project/test_private_api_pins.py, which compiles it).
#: XLA_FFI_Extension_Base: its type. XLA_FFI_Metadata_Extension: the metadata pointer.
_EXTENSION_TYPE, _EXTENSION_METADATA = 1, 3
#: XLA_FFI_CallFrame: extension_start, stage, args.args and rets.rets; the words read.
_FRAME_EXTENSION, _FRAME_STAGE, _FRAME_ARGS, _FRAME_RESULTS, _FRAME_WORDS = 1, 4, 9, 14, 15
#: XLA_FFI_Buffer: dtype, data and dims; its size in words.
_BUFFER_DTYPE, _BUFFER_DATA, _BUFFER_DIMS, _BUFFER_WORDS = 2, 3, 5, 6
#: XLA_FFI_Metadata, in 32-bit words: api_version's struct_size (a 64-bit word, with its
#: extension_start next), its major and minor versions, and the traits.
_METADATA_VERSION_SIZE, _METADATA_MAJOR, _METADATA_MINOR, _METADATA_TRAITS = 2, 6, 7, 8
#: sizeof(XLA_FFI_Api_Version), in bytes.
_VERSION_BYTES = 24
#: The columns of the formats' tables (``kernel_tables``).
_THRESHOLD_COLUMNS, _BLOCK_COLUMNS = len(THRESHOLD_ROW), len(BLOCK_ROW)


@intrinsic
def _pointer(typingctx, address):
    """The ``void*`` at an integer address."""

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

    return types.voidptr(types.int64), codegen


@numba.njit(inline="always")
def _words(address, n):
    return numba.carray(_pointer(address), (n,), np.int64)


@numba.njit(inline="always")
def _low32(word):
    return word & 0xFFFFFFFF


@numba.njit(cache=True)
def _answer_metadata(extension):
    """Fills the XLA_FFI_Metadata that the extension points to: the API version (an
    XLA_FFI_Api_Version with no extensions) and no traits."""
    metadata = _words(extension, _EXTENSION_METADATA + 1)[_EXTENSION_METADATA]
    words = _words(metadata, _METADATA_VERSION_SIZE // 2 + 2)
    words[_METADATA_VERSION_SIZE // 2] = _VERSION_BYTES
    words[_METADATA_VERSION_SIZE // 2 + 1] = 0
    ints = numba.carray(_pointer(metadata), (_METADATA_TRAITS + 1,), np.int32)
    ints[_METADATA_MAJOR] = _API_MAJOR
    ints[_METADATA_MINOR] = _API_MINOR
    ints[_METADATA_TRAITS] = 0


@numba.njit(cache=True)
def _float32_bits(value):
    """The bit pattern of a float64 rounded to float32, worked out with integer arithmetic
    where the float32 is subnormal: XLA runs its CPU threads in flush-to-zero mode, which
    would turn such a conversion into 0."""
    magnitude = abs(value)
    if magnitude == 0.0 or magnitude >= 2.0**-126 or not np.isfinite(value):
        return np.array([np.float32(value)]).view(np.int32)[0]
    bits = np.int32(np.rint(math.ldexp(magnitude, 149)))  # the mantissa, 2**-149 a unit
    return bits | np.int32(-(2**31)) if value < 0 else bits


@numba.njit(cache=True)
def _handler(frame_pointer, float_type, int_type, summarise):
    """``XLA_FFI_Error* (XLA_FFI_CallFrame*)`` for a call ``(values, thresholds, blocks,
    layout) -> (counts, moments)``; ``layout`` holds the histogram's lowest exponent, its
    bins and the length of the rows along which block formats (``blocks``, int32 rows of
    ``BlockFormat.kernel_row``) take their blocks. ``summarise`` is the CPU kernel of
    ``float_type`` arrays, whose thresholds come as ``int_type`` bit patterns."""
    frame = numba.carray(frame_pointer, (_FRAME_WORDS,), np.int64)
    extension = frame[_FRAME_EXTENSION]
    if (
        extension != 0
        and _low32(_words(extension, _EXTENSION_TYPE + 1)[_EXTENSION_TYPE]) == _METADATA_EXTENSION
    ):
        _answer_metadata(extension)
        return _pointer(0)
    if _low32(frame[_FRAME_STAGE]) != _EXECUTE:
        return _pointer(0)
    arguments = _words(frame[_FRAME_ARGS], 4)
    source = _words(arguments[0], _BUFFER_WORDS)
    n = _words(source[_BUFFER_DIMS], 1)[0]
    values = numba.carray(_pointer(source[_BUFFER_DATA]), (n,), float_type)
    table = _words(arguments[1], _BUFFER_WORDS)
    n_formats = _words(table[_BUFFER_DIMS], 2)[0]
    thresholds = np.empty((n_formats, _THRESHOLD_COLUMNS), np.int64)
    thresholds[:] = numba.carray(
        _pointer(table[_BUFFER_DATA]), (n_formats, _THRESHOLD_COLUMNS), int_type
    )
    blocks_buffer = _words(arguments[2], _BUFFER_WORDS)
    n_blocks = _words(blocks_buffer[_BUFFER_DIMS], 2)[0]
    blocks = np.empty((n_blocks, _BLOCK_COLUMNS), np.int64)
    blocks[:] = numba.carray(
        _pointer(blocks_buffer[_BUFFER_DATA]), (n_blocks, _BLOCK_COLUMNS), np.int32
    )
    layout_buffer = _words(arguments[3], _BUFFER_WORDS)
    layout = numba.carray(_pointer(layout_buffer[_BUFFER_DATA]), (3,), np.int32)
    hist_lo, n_bins, row_length = np.int64(layout[0]), np.int64(layout[1]), np.int64(layout[2])
    counts, moments = summarise(values, hist_lo, n_bins, thresholds, blocks, 0, row_length, -1.0)
    results = _words(frame[_FRAME_RESULTS], 2)
    counts_out = _words(results[0], _BUFFER_WORDS)
    moments_out = _words(results[1], _BUFFER_WORDS)
    counts_to = _pointer(counts_out[_BUFFER_DATA])
    if _low32(counts_out[_BUFFER_DTYPE]) == _S64:
        numba.carray(counts_to, (len(counts),), np.int64)[:] = counts
    else:
        numba.carray(counts_to, (len(counts),), np.int32)[:] = counts
    moments_to = _pointer(moments_out[_BUFFER_DATA])
    n_moments = len(moments)
    if _low32(moments_out[_BUFFER_DTYPE]) == _F64:
        numba.carray(moments_to, (n_moments,), np.float64)[:] = moments
    else:
        out = numba.carray(moments_to, (n_moments,), np.int32)
        for k in range(n_moments):
            out[k] = _float32_bits(moments[k])
    return _pointer(0)


_SIGNATURE = types.voidptr(types.voidptr)


def _float32_handler(frame_pointer):
    return _handler(frame_pointer, np.float32, np.int32, _cpu_kernel._summarise_float32)


def _float64_handler(frame_pointer):
    return _handler(frame_pointer, np.float64, np.int64, _cpu_kernel._summarise_float64)


_HANDLERS = {"float32": _float32_handler, "float64": _float64_handler}
#: The compiled handlers, kept alive as long as any program may call them.
_compiled: list = []


def ready() -> bool:
    """Whether the FFI targets are registered (on first use; if that fails, or jax's FFI
    headers have another major version than the handler reads, the reason is warned once
    and the caller keeps the array kernel)."""
    try:
        _register()
    except _OlderFfi:
        versions.lacking(
            f"the CPU kernel inside jax.jit (XLA's FFI API {_API_MAJOR}.{_API_MINOR})",
            f"jaxlib {_FFI_JAXLIB}",
            "the array kernel runs there instead: the same numbers, slower",
        )
        return False
    except Exception as error:  # a jax without this FFI API, for one
        _warn_once(f"{type(error).__name__}: {error}")
        return False
    return True


class _OlderFfi(Exception):
    """jaxlib's FFI API is older than the handler's (``_API_MINOR``)."""


#: The first jaxlib whose FFI API is ``_API_MAJOR``.``_API_MINOR`` (0.9 has 0.2).
_FFI_JAXLIB = "0.10"


@functools.cache
def _warn_once(reason: str) -> None:
    warnings.warn(
        f"tandv_tb: the CPU kernel cannot run inside jax.jit here ({reason}); "
        "the slower array kernel is used",
        RuntimeWarning,
        stacklevel=3,
    )


@functools.cache
def _register() -> None:
    import ctypes
    import pathlib
    import re

    import jax

    header = pathlib.Path(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h").read_text()
    major = re.search(r"#define XLA_FFI_API_MAJOR (\d+)", header)
    if major is None or int(major.group(1)) != _API_MAJOR:
        raise RuntimeError(f"XLA FFI API major version {major and major.group(1)}, not 0")
    minor = re.search(r"#define XLA_FFI_API_MINOR (\d+)", header)
    if minor is not None and int(minor.group(1)) < _API_MINOR:
        raise _OlderFfi(minor.group(1))
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
    for compute, function in _HANDLERS.items():
        handler = numba.cfunc(_SIGNATURE, cache=True)(function)  # compiled on first use
        _compiled.append(handler)
        capsule = new_capsule(handler.address, None, None)
        jax.ffi.register_ffi_target(f"tandv_stats_{compute}", capsule, platform="cpu")


def compute(values, dtype: str, formats: tuple[str, ...], row_length: int = 1):
    """(counts, moments) of a flat float32/float64 jax array (widened from ``dtype``), in
    the calling program; block formats take their blocks along rows of ``row_length``
    (below 2**31)."""
    import jax
    import jax.numpy as jnp

    _register()
    compute_dtype = "float64" if dtype == "float64" else "float32"
    n_counts, n_moments = engine_layout(dtype, formats)
    wide = jax.config.jax_enable_x64
    shapes = (
        jax.ShapeDtypeStruct((n_counts,), jnp.int64 if wide else jnp.int32),
        jax.ShapeDtypeStruct((n_moments,), jnp.float64 if wide else jnp.float32),
    )
    thresholds = threshold_bits(dtype, formats, compute_dtype == "float64")
    if compute_dtype == "float32":
        thresholds = thresholds.astype(np.int32)
    blocks = block_table(dtype, formats).astype(np.int32)
    dtype_info = info(dtype)
    layout = np.array([dtype_info.min_exponent, dtype_info.n_bins, max(row_length, 1)], np.int32)
    call = jax.ffi.ffi_call(f"tandv_stats_{compute_dtype}", shapes, vmap_method="sequential")
    return call(jax.lax.stop_gradient(values), thresholds, blocks, layout)
