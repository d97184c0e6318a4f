"""Argument checks of the all-to-all-v family, before any C call.

The C library cannot see the length of an array it is handed: host counts
that run past x or out, or splits arrays that are too short, would make it
read or write memory that is not theirs.  Everything it cannot check is
checked here, with the reason named.
"""
from __future__ import annotations

import operator
from ctypes import Array, c_size_t
from typing import Any, List, Optional, Sequence, Tuple

from ._dlpack import Buffer
from .errors import invalid

SIZE_MAX = (1 << 64) - 1


def host_counts(fn: str, what: str, values: Any, world: int) -> List[int]:
    """`values` (a sequence of `world` ints >= 0, NumPy's included) as ints."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError("%s: %s is %s; it takes a sequence of %d ints (one per rank)" %
                        (fn, what, type(values).__name__, world))
    if len(values) != world:
        invalid("%s: %s has %d entries; it takes one per rank (%d)" %
                (fn, what, len(values), world))
    out = []
    for i, v in enumerate(values):
        try:
            n = operator.index(v)
        except TypeError:
            raise TypeError("%s: %s[%d] is %r, not an int" % (fn, what, i, v)) from None
        if not 0 <= n <= SIZE_MAX:
            invalid("%s: %s[%d] is %d; counts and displacements are >= 0" % (fn, what, i, n))
        out.append(n)
    return out


def packed(counts: Sequence[int]) -> List[int]:
    """The exclusive prefix sums of counts: where packed ranges start."""
    out, at = [], 0
    for n in counts:
        out.append(at)
        at += n
    return out


def check_ranges(fn: str, buf: str, numel: int, counts: Sequence[int],
                 displs: Optional[Sequence[int]], what: str) -> None:
    """Every range [displs[p], displs[p] + counts[p]) lies inside `numel`
    elements (displs None: packed)."""
    starts = packed(counts) if displs is None else displs
    for p, (start, n) in enumerate(zip(starts, counts)):
        if n and start + n > numel:
            invalid("%s: %s's range for rank %d ends at element %d (displacement %d + count %d"
                    "%s); %s holds %d elements" %
                    (fn, what, p, start + n, start, n, "" if displs is not None else ", packed",
                     buf, numel))


def as_size_t(values: Optional[Sequence[int]]) -> Optional[Array]:
    return None if values is None else (c_size_t * len(values))(*values)


def rows_of(fn: str, bx: Buffer, bo: Buffer) -> Tuple[int, int, int]:
    """(send_rows, recv_rows, row_elems): rows are shape[0], a row the
    other dimensions; x's and out's rows must hold the same elements."""
    for what, b in (("x", bx), ("out", bo)):
        if not b.shape:
            invalid("%s: %s is 0-d; it takes an array of rows (shape[0] rows)" % (fn, what))
    row_x, row_o = _prod(bx.shape[1:]), _prod(bo.shape[1:])
    if row_x != row_o:
        invalid("%s: a row of x (shape %s) holds %d elements and one of out (shape %s) %d; "
                "they must be the same" % (fn, bx.shape, row_x, bo.shape, row_o))
    if row_x == 0:
        invalid("%s: rows of 0 elements (x's shape %s)" % (fn, bx.shape))
    return bx.shape[0], bo.shape[0], row_x


def check_splits(fn: str, what: str, b: Buffer, shapes: Sequence[Tuple[int, ...]],
                 writes: bool) -> None:
    """A splits array: int64, one of `shapes`, writable when C writes it
    (where it lives is the caller's check)."""
    if b.dtype.name != "int64":
        raise TypeError("%s: %s is %s; splits and offsets are int64" % (fn, what, b.dtype.name))
    if b.shape not in [tuple(s) for s in shapes]:
        invalid("%s: %s has shape %s; it takes %s int64" %
                (fn, what, b.shape, " or ".join(str(tuple(s)) for s in shapes)))
    if writes and b.readonly:
        invalid("%s: %s is read-only; the call writes it" % (fn, what))


def whole(fn: str, what: str, value: Any, least: int, most: int = (1 << 31) - 1) -> int:
    """`value` as an int in [least, most] (an int parameter of C)."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError("%s: %s is %r, not an int" % (fn, what, value)) from None
    if not least <= n <= most:
        invalid("%s: %s is %d; it takes an int in [%d, %d]" % (fn, what, n, least, most))
    return n


def _prod(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n
