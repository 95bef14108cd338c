"""pandas interop: numerics event files as a DataFrame (the contract's schema), and back.

Modules: ``events`` (reading event files, damage included), ``format_view`` (a record seen
through a format), ``reading`` (``read_frame``), ``schema`` (``validate``), ``tandv``
(``write_frame``, ``to_tandv``).

``read_frame`` reads every event file under a logdir into a DataFrame whose columns are a
MultiIndex with three top levels:

- ``metadata``: name, type, tensor_type, step, dtype, run, order;
- ``scalar_stats``: the 9 statistics of ``STATISTICS``, then the counts numel, zero_count,
  nan_count, posinf_count, neginf_count;
- ``exponent_counts``: the int bins ``n`` plus the float labels ``-inf`` and ``+inf``.
  Without a format they span the dtypes' whole range, ``-inf`` holds the zeros and ``+inf``
  the infinities. With ``format=F`` they span F's range: ``-inf`` holds the zeros plus the
  values that underflow in F, ``+inf`` the values that overflow plus the infinities, and
  every other value stays in its own bin, clamped into F's range (``format_split``).
  For a block-scaled format F (``tandv_tb.formats.blocks``) the bins span the dtypes' range
  and are not clamped: ``-inf`` holds the zeros plus F's underflow, ``+inf`` F's overflow
  plus the infinities (``block_split``); a block format that was not recorded raises.

For a format that was not recorded at tracking time the split is an estimate (and
``read_frame`` warns with ``EstimateWarning``; rule in ``format_view``). Damaged files,
records from a newer tandv_tb and malformed records are skipped with a ``DataWarning``
naming the file, tag, step and reason (``events``); everything else is read.

tandv (graphcore-research/track-and-visualize) logframes, as found in its source
(``tandv/track/common/_types.py``, ``_utils.py``, ``track/torch/stash_values.py``):

- columns ``metadata``: step, name, type (``str(type(module))`` or None for parameters),
  tensor_type (``Activation``, ``Gradient``, ``Weights``, ``Weight_Gradients``,
  ``Optimiser_State.<key>``), dtype (``torch.``/``jax`` prefix stripped: ``float32``);
  ``scalar_stats``: mean, std, mean_abs, max_abs, min_abs, rm2, rm4, rm8; ``exponent_counts``:
  ``-inf``, the ints -16..16, ``inf``. Its validator accepts no other metadata column.
- its ``std`` is torch's default, the *sample* standard deviation (ours is the population
  one): ``write_frame``/``to_tandv`` convert with the tensor's count N (factor
  sqrt((N-1)/N) and back).
- its bins come from ``torch.frexp``: label ``e`` counts ``2**(e-1) <= |x| < 2**e``, i.e. our
  bin ``n = e - 1`` (``TANDV_BIN_SHIFT``); exponents beyond -16..16 go to ``-inf``/``inf``,
  and zeros, NaN and Inf all land in its label 0 (frexp gives them exponent 0). So
  ``write_frame`` of a tandv frame puts label ``e`` in bin ``e - 1``, its ``-inf``/``inf``
  counts in the bins just beyond (-18 and 16), and cannot tell zeros, NaN or Inf apart:
  it records zero_count = nan_count = inf counts = 0 and numel = the sum of the counts.
  ``to_tandv`` maps bin ``n`` to label ``n + 1`` (clamped into ``-inf``/``inf``) and puts
  zeros in ``-inf`` and infinities in ``inf`` (our contract's meaning of those labels).
"""

from tandv_tb.frame.events import DataWarning, read_records
from tandv_tb.frame.format_view import format_split
from tandv_tb.frame.reading import EstimateWarning, read_frame
from tandv_tb.frame.schema import SchemaError, validate
from tandv_tb.frame.tandv import to_tandv, write_frame

__all__ = [
    "DataWarning",
    "EstimateWarning",
    "SchemaError",
    "format_split",
    "read_frame",
    "read_records",
    "to_tandv",
    "validate",
    "write_frame",
]
