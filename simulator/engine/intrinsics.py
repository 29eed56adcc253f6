"""LLVM-level helpers for the compiled engine's numba kernels: bitcasts between floats and
their bit patterns, int32 arithmetic that numba would widen to int64, the float32 fma, a cache
prefetch hint, and a function attribute that lets LLVM's vectoriser use 512-bit registers.
Each is a numba ``@intrinsic``: usable only inside compiled functions.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _bitcast(name: str, src, dst, dst_ir, doc: str):
    """A numba intrinsic reinterpreting a value of ``src``'s kind and width (a float, or an
    integer of either signedness) as ``dst`` (LLVM type ``dst_ir``), named ``name`` (numba
    keys its typing templates by the name)."""
    def impl(typingctx, x):
        if not (isinstance(x, type(src)) and x.bitwidth == src.bitwidth):
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], dst_ir)
        return dst(x), codegen
    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    return intrinsic(impl)


bits64 = _bitcast("bits64", types.float64, types.int64, ir.IntType(64),
                  "The int64 bit pattern of a float64 (a bitcast).")
float64_of = _bitcast("float64_of", types.int64, types.float64, ir.DoubleType(),
                      "The float64 of an int64 bit pattern (a bitcast).")
float32_of = _bitcast("float32_of", types.int32, types.float32, ir.FloatType(),
                      "The float32 of an int32 bit pattern (a bitcast).")
bits32 = _bitcast("bits32", types.float32, types.int32, ir.IntType(32),
                  "The int32 bit pattern of a float32 (a bitcast).")


@intrinsic
def prefer_512_bit_vectors(typingctx):
    """Marks the function being compiled with LLVM's ``"prefer-vector-width"="512"``: its loops
    may vectorise over 512-bit registers where the CPU has them (LLVM's x86 cost model prefers
    256 bits otherwise). A no-op on CPUs without AVX-512."""
    def codegen(context, builder, sig, args):
        # a string attribute: llvmlite's FunctionAttributes knows only keyword attributes
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()
    return types.none(), codegen


def _int32_op(name: str, build, doc: str):
    """A numba intrinsic of two int32 values giving int32 by the LLVM instruction ``build``
    makes (numba widens int32 arithmetic to int64, which halves the lanes of a vector loop)."""
    def impl(typingctx, x, y):
        if not all(isinstance(v, types.Integer) and v.bitwidth == 32 for v in (x, y)):
            return None

        def codegen(context, builder, sig, args):
            return build(builder, *args)
        return types.int32(x, y), codegen
    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    return intrinsic(impl)


add_int32 = _int32_op("add_int32", lambda b, x, y: b.add(x, y), "x + y in int32, wrapping.")
sub_int32 = _int32_op("sub_int32", lambda b, x, y: b.sub(x, y), "x - y in int32, wrapping.")
and_int32 = _int32_op("and_int32", lambda b, x, y: b.and_(x, y), "x & y of int32.")
xor_int32 = _int32_op("xor_int32", lambda b, x, y: b.xor(x, y), "x ^ y of int32.")
or_int32 = _int32_op("or_int32", lambda b, x, y: b.or_(x, y), "x | y of int32.")
shl_int32 = _int32_op("shl_int32", lambda b, x, y: b.shl(x, y),
                      "x << y of int32 (y in 0..31; the bits shifted out are lost).")
shr_int32 = _int32_op("shr_int32", lambda b, x, y: b.ashr(x, y),
                      "x >> y of int32, arithmetic (y in 0..31).")


@intrinsic
def clz_uint32(typingctx, x):
    """The count of leading zero bits of an int32 read as unsigned (32 for 0; ``vplzcntd``)."""
    if not (isinstance(x, types.Integer) and x.bitwidth == 32):
        return None

    def codegen(context, builder, sig, args):
        return builder.ctlz(args[0], ir.Constant(ir.IntType(1), 0))
    return types.int32(x), codegen


@intrinsic
def float32_of_uint32(typingctx, x):
    """An int32 read as unsigned, converted to float32 (rounded to nearest even:
    ``vcvtudq2ps``; exact below 2^24)."""
    if not (isinstance(x, types.Integer) and x.bitwidth == 32):
        return None

    def codegen(context, builder, sig, args):
        return builder.uitofp(args[0], ir.FloatType())
    return types.float32(x), codegen


@intrinsic
def trunc_int32(typingctx, x):
    """A float32 or float64 toward zero as int32 (``cvttps2dq``; out of range: undefined)."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, sig, args):
        return builder.fptosi(args[0], ir.IntType(32))
    return types.int32(x), codegen


@intrinsic
def fma_float32(typingctx, a, b, c):
    """``a * b + c`` of three float32 rounded once to the nearest float32, ties to even, with
    IEEE subnormals (``llvm.fma.f32``: ``vfmadd`` where the CPU has it, else libm's ``fmaf``;
    never contracted or reassociated)."""
    if not all(isinstance(v, types.Float) and v.bitwidth == 32 for v in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        return builder.fma(*args)
    return types.float32(a, b, c), codegen


@intrinsic
def fma_float64(typingctx, a, b, c):
    """``a * b + c`` of three float64 rounded once to the nearest float64, ties to even
    (``llvm.fma.f64``: ``vfmadd`` where the CPU has it, else libm's ``fma``; never contracted
    or reassociated)."""
    if not all(isinstance(v, types.Float) and v.bitwidth == 64 for v in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        return builder.fma(*args)
    return types.float64(a, b, c), codegen


@intrinsic
def prefetch(typingctx, arr, index):
    """A hint to bring ``arr[index]`` (a C-contiguous 1-d array, ``index`` in range) into the
    data caches for a read soon (``llvm.prefetch``, read, highest locality: ``prefetcht0``).
    No effect on any value; a loop of independent table reads issues it some iterations ahead,
    so that more cache misses are in flight at once than out-of-order execution keeps."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and isinstance(index, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        # (address, rw = 0: read, locality = 3: keep in every level, cache type = 1: data)
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.none(arr, index), codegen
