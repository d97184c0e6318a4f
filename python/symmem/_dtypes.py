"""Element types: NumPy-style names, symmem's codes, DLPack and array-interface codes."""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

from .errors import invalid

# DLPack type codes (dlpack.h: DLDataTypeCode).
DL_INT, DL_UINT, DL_FLOAT, DL_BFLOAT = 0, 1, 2, 4
DL_FLOAT8_E4M3FN, DL_FLOAT8_E5M2 = 10, 12


class DType(NamedTuple):
    name: str        # NumPy-style name, what the Python API shows
    code: int        # symm_dtype_t
    itemsize: int
    dl_code: int     # DLPack type code
    typestr: Optional[str]  # array-interface type string; None: none exists (bf16, FP8)


# In symm_dtype_t order.
DTYPES: Tuple[DType, ...] = (
    DType("float16", 0, 2, DL_FLOAT, "<f2"),
    DType("bfloat16", 1, 2, DL_BFLOAT, None),
    DType("float32", 2, 4, DL_FLOAT, "<f4"),
    DType("float64", 3, 8, DL_FLOAT, "<f8"),
    DType("int8", 4, 1, DL_INT, "|i1"),
    DType("int16", 5, 2, DL_INT, "<i2"),
    DType("int32", 6, 4, DL_INT, "<i4"),
    DType("int64", 7, 8, DL_INT, "<i8"),
    DType("uint8", 8, 1, DL_UINT, "|u1"),
    DType("uint16", 9, 2, DL_UINT, "<u2"),
    DType("uint32", 10, 4, DL_UINT, "<u4"),
    DType("uint64", 11, 8, DL_UINT, "<u8"),
    DType("float8_e4m3fn", 12, 1, DL_FLOAT8_E4M3FN, None),
    DType("float8_e5m2", 13, 1, DL_FLOAT8_E5M2, None),
)

# Types NumPy lacks, which ml_dtypes provides under these names: what
# View.numpy() returns for them, the same bytes as the unsigned integer of
# their size.
ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")

# Names accepted besides the NumPy ones: symmem's own (symm_dtype_name) and
# the usual short aliases of PyTorch and NumPy.
_ALIASES: Dict[str, str] = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "float8_e4m3": "float8_e4m3fn",
    "half": "float16", "float": "float32", "double": "float64",
    "short": "int16", "int": "int32", "long": "int64",
}
_BY_NAME: Dict[str, DType] = {d.name: d for d in DTYPES}
_BY_DL: Dict[Tuple[int, int], DType] = {(d.dl_code, d.itemsize * 8): d for d in DTYPES}
_BY_TYPESTR: Dict[str, DType] = {}
for _d in DTYPES:
    if _d.typestr:
        _BY_TYPESTR[_d.typestr] = _d
        _BY_TYPESTR["=" + _d.typestr[1:]] = _d
        _BY_TYPESTR["|" + _d.typestr[1:]] = _d
        _BY_TYPESTR["<" + _d.typestr[1:]] = _d


def dtype_of(spec: Any) -> DType:
    """Resolves a dtype given as a name ("float32", "bf16"), a NumPy dtype or
    scalar type, a PyTorch dtype, or a symm_dtype_t code."""
    if isinstance(spec, DType):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        if 0 <= spec < len(DTYPES):
            return DTYPES[spec]
        invalid("dtype code %d out of range [0, %d)" % (spec, len(DTYPES)))
    if isinstance(spec, str):
        name = spec
    elif isinstance(getattr(spec, "name", None), str):
        name = spec.name          # numpy.dtype, ml_dtypes
    elif isinstance(getattr(spec, "__name__", None), str):
        name = spec.__name__      # numpy.float32 and other scalar types
    else:
        name = str(spec)          # torch.float32 prints as "torch.float32"
    name = name.lower()
    if name.startswith("torch."):
        name = name[len("torch."):]
    name = _ALIASES.get(name, name)
    found = _BY_NAME.get(name)
    if found is None:
        invalid("unknown dtype %r; symmem has %s" % (spec, ", ".join(_BY_NAME)))
    return found


def dtype_from_dlpack(code: int, bits: int, lanes: int) -> DType:
    """The dtype of a DLPack DLDataType."""
    found = _BY_DL.get((code, bits))
    if found is None or lanes != 1:
        invalid("DLPack dtype (code %d, bits %d, lanes %d) has no symmem dtype" %
                (code, bits, lanes))
    return found


def dtype_from_typestr(typestr: str, hint: Any = None) -> DType:
    """The dtype of an array-interface type string ("<f4").  `hint`: the
    array's own dtype, which names what a type string NumPy cannot tell
    holds: ml_dtypes' bfloat16 arrays export as "<V2" with dtype name
    "bfloat16", its FP8 arrays as "<f1" ("float8_e4m3fn", "float8_e5m2")."""
    found = _BY_TYPESTR.get(typestr)
    name = getattr(hint, "name", None)
    if found is None and typestr[1:2] in ("V", "f") and isinstance(name, str):
        named = _BY_NAME.get(name.lower())
        if named is not None and "%s%d" % (typestr[:2], named.itemsize) == typestr:
            found = named
    if found is None:
        invalid("array-interface type %r has no symmem dtype (big-endian, bool, "
                "complex and structured types have none)" % typestr)
    return found
