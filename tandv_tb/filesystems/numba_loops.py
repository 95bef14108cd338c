"""The compiled (numba) byte gather of ``ranges``, apart so that importing the storage does
not load numba: ``ranges`` imports this module on first use."""

from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True)
def gather(data, starts, sizes, out, out_starts):
    for i in range(len(starts)):
        out[out_starts[i] : out_starts[i] + sizes[i]] = data[starts[i] : starts[i] + sizes[i]]
