"""JSON and CSV bodies, fast for big number arrays, answered through ``http_util.Respond``.

Non-finite floats are sent as TensorBoard does (``"NaN"``, ``"Infinity"``,
``"-Infinity"``); missing values as ``null``. Number arrays are serialized with
``ndarray.tolist`` and one ``json.dumps`` instead of a Python walk over every value; a
big matrix (the heatmap) is sent as base64 of its little-endian floats (``Matrix``).
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import re
import secrets

import numpy as np
from tensorboard import errors
from tensorboard.backend import http_util
from werkzeug import wrappers

JSON_TYPE = "application/json"
CSV_TYPE = "text/csv; charset=utf-8"


class Numbers:
    """A numpy array (1-D or 2-D) to send as JSON numbers; ``present`` False -> null."""

    def __init__(self, values: np.ndarray, present: np.ndarray | None = None):
        self.values = np.asarray(values)
        self.present = present

    def to_json(self) -> str:
        values = self.values
        if np.issubdtype(values.dtype, np.integer):
            return json.dumps(values.tolist())
        as_list = values.astype(np.float64).tolist()
        if self.present is not None and not self.present.all():
            for index in zip(*np.nonzero(~self.present)):
                _set(as_list, index, None)
        text = json.dumps(as_list, allow_nan=True)
        if not np.isfinite(values).all():
            text = _quote_non_finite(text)
        return text


class Encoded(list):
    """A list of plain JSON values (strings, integers, booleans, None and finite floats,
    in lists and dicts) that ``dumps`` encodes in one ``json.dumps`` instead of walking
    each of its values (a heatmap's 1,000 columns and layers); a list for everyone else."""

    def to_json(self) -> str:
        return json.dumps(self, separators=(",", ":"), allow_nan=False)


_FLOAT32 = np.finfo(np.float32)


class Matrix(Numbers):
    """A 2-D float array sent as ``{"dtype", "shape", "data", "missing"}``: ``data`` is base64
    of the row-major little-endian float32 (or float64) values, ``missing`` base64 of one bit
    per cell (``numpy.packbits``, little bit order; 1 = no data) or null when no cell is
    missing. float32 is used unless it would change a value (out of its range, or an integer
    of 2**24 or more); see ``http_api.md``."""

    def to_json(self) -> str:
        values = np.asarray(self.values, dtype=np.float64)
        present = self.present
        if present is not None and not present.all():
            values = np.where(present, values, np.nan)
        else:
            present = None
        dtype = "float32" if _fits_float32(values) else "float64"
        data = values.astype("<f4" if dtype == "float32" else "<f8", order="C")
        missing = "null"
        if present is not None:
            bits = np.packbits(~present.reshape(-1), bitorder="little")
            missing = '"' + base64.b64encode(bits).decode("ascii") + '"'
        # base64 needs no JSON escaping: 5 MB of it are put in the text as they are
        rows, columns = values.shape
        return (
            f'{{"dtype":"{dtype}","shape":[{rows},{columns}],"data":"'
            + base64.b64encode(data.reshape(-1).view(np.uint8)).decode("ascii")
            + f'","missing":{missing}}}'
        )


def _fits_float32(values: np.ndarray) -> bool:
    """Whether float32 keeps every finite value: none out of its range, and no integer of
    2**24 or more that it would change (NaN and infinities are kept by any float)."""
    magnitude = np.abs(values)
    finite = magnitude != np.inf
    if ((magnitude > _FLOAT32.max) & finite).any():
        return False
    if ((magnitude < _FLOAT32.tiny) & (magnitude != 0)).any():
        return False
    big = values[(magnitude >= 2**24) & finite]
    big_integers = big[big == np.round(big)]
    return bool((big_integers.astype(np.float32).astype(np.float64) == big_integers).all())


def _set(nested: list, index: tuple, value) -> None:
    for i in index[:-1]:
        nested = nested[i]
    nested[index[-1]] = value


_NON_FINITE = re.compile(r"-?Infinity|NaN")


def _quote_non_finite(text: str) -> str:
    # In a JSON array of numbers these words can only be the non-finite tokens.
    return _NON_FINITE.sub(lambda m: f'"{m.group(0)}"', text)


def clean(value):
    """A JSON-ready copy of small values: non-finite floats as TensorBoard's strings."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, (np.floating, np.integer)):
        return clean(value.item())
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


_PLAIN = (str, int, bool)


def dumps(payload) -> str:
    """JSON text of ``payload``, where ``Numbers`` anywhere are encoded in bulk."""
    token = secrets.token_hex(8)
    raw: list[str] = []

    def swap(value):
        if value is None or type(value) in _PLAIN:  # most leaves: sent as they are
            return value
        if isinstance(value, (Numbers, Encoded)):
            raw.append(value.to_json())
            return f"@{token}:{len(raw) - 1}@"
        if isinstance(value, dict):
            return {str(k): swap(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [swap(v) for v in value]
        return clean(value)

    text = json.dumps(swap(payload), separators=(",", ":"))
    for index, part in enumerate(raw):
        text = text.replace(f'"@{token}:{index}@"', part, 1)
    return text


def uncompressed_json_response(body: str):
    """A JSON response sent as is: for bodies made mostly of base64 (``Matrix``), which
    gzip shrinks by about a quarter at a cost of tens of milliseconds. Headers as
    ``http_util.Respond`` sets them."""
    content = body.encode("utf-8")
    headers = [
        ("X-Content-Type-Options", "nosniff"),
        ("Expires", "0"),
        ("Cache-Control", "no-cache, must-revalidate"),
    ]
    return wrappers.Response(content, status=200, content_type=JSON_TYPE, headers=headers)


def public_details(error: errors.PublicError) -> str:
    """What a TensorBoard error says, without the code name its constructor puts first
    ("Invalid argument: ", "Not found: "): the status already says that, and the plugin's
    messages are sentences of their own."""
    text = str(error)
    try:
        code_name = str(type(error)())  # the text of the same error without details
    except TypeError:  # an error whose constructor needs more than details
        return text
    prefix = f"{code_name}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def error_response(request, message: str, code: int, storage: str | None = None):
    """``{"error": message}``, with ``"storage": kind`` where the logdir's storage failed
    (``denied``, ``missing``, ``unreachable``, ``failed``)."""
    body = {"error": message} if storage is None else {"error": message, "storage": storage}
    return http_util.Respond(request, json.dumps(body), JSON_TYPE, code=code)


def csv_text(header: list[str], rows) -> str:
    """CSV with a header row; floats non-finite as nan/inf/-inf, None as empty."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_csv_cell(v) for v in row])
    return out.getvalue()


def _csv_cell(value):
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return value


def csv_response(request, text: str, filename: str):
    disposition = ("Content-Disposition", f'attachment; filename="{filename}"')
    return http_util.Respond(request, text, CSV_TYPE, headers=[disposition])
