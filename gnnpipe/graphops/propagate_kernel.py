"""The ``jit`` propagation kernel: a CSR row gather-sum compiled by numba, with software prefetch.

``out[r] = sum over row r's non-zeros, in stored order, of values[e] * x[col[e]]`` — the same
sum in the same order as ATen's ``torch.sparse.mm(A, x, reduce="sum")`` (each output element
starts at 0 and takes one fused multiply-add per non-zero: ``fastmath={"contract"}`` lets LLVM
fuse as GCC fuses ATen's vector code), so the product is bit-identical to ATen's where ATen
runs its AVX2 / AVX512 build; its generic build (``ATEN_CPU_CAPABILITY=default``) rounds each
product first and differs in the last bits, within 1e-6
(``tests/graphops/test_propagate_kernel.py``).

The gain over ATen comes from ``llvm.prefetch`` (numba has no prefetch of its own, so
``_prefetch`` is a numba ``@intrinsic`` emitting it): the F-wide operand row ``PREFETCH_AHEAD``
non-zeros ahead is requested while the current one is summed, so several DRAM row reads are in
flight per core instead of one. Rows are split over numba's threads by ``prange`` (each output
row computed by one thread, non-zeros in stored order), so the result does not depend on the
thread count; the thread count follows ``torch.get_num_threads()``.

Importing this module imports numba (~1-2 s); the first call then loads the machine code
cached next to this file (``gnnpipe/__pycache__``, ignored by git and ``.dvcignore``; where
that is read-only, numba's per-user cache) in ~2-3 s, or compiles it (~8 s; with no writable
cache location at all, once per process). Measured: docs/benchmarks/2026-12-04-propagate-kernel.md.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

PREFETCH_AHEAD = 16  # non-zeros ahead: ~16 rows in flight per core hides a DRAM latency here
CACHE_LINE_FLOATS = 16  # one prefetch per 64-byte line of the operand row


@intrinsic
def _prefetch(typingctx, array, row, column):
    """``llvm.prefetch`` (read, keep in all cache levels) of ``&array[row, column]``."""
    sig = types.void(array, row, column)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        index = [context.cast(builder, value, kind, types.intp)
                 for value, kind in zip(args[1:], signature.args[1:])]
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, index,
                                           wraparound=False, boundscheck=False)
        byte_pointer, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]),
            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(pointer, byte_pointer), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


def _row_sum(out, i, x, col, values, lo, hi, nnz, ahead):
    """out[i] = sum over e in lo:hi, in order, of values[e] * x[col[e]] (one output row)."""
    f = x.shape[1]
    for k in range(f):
        out[i, k] = 0.0
    for e in range(lo, hi):
        if ahead > 0 and e + ahead < nnz:
            later = np.intp(col[e + ahead])
            for k in range(0, f, CACHE_LINE_FLOATS):
                _prefetch(x, later, k)
        c, v = np.intp(col[e]), values[e]
        for k in range(f):
            out[i, k] += x[c, k] * v  # contracted to fma(x, v, out), as ATen's vector code is


def _spmm_rows(crow, col, values, x, out, start, stop, ahead):
    nnz = np.intp(crow[crow.shape[0] - 1])
    for r in prange(start, stop):  # one thread per output row: thread count cannot change it
        _row_sum(out, r - start, x, col, values, np.intp(crow[r]), np.intp(crow[r + 1]), nnz,
                 ahead)


def _jit(fn, **flags):
    flags.update(nogil=True, fastmath={"contract"}, boundscheck=False)
    try:
        return numba.njit(cache=True, **flags)(fn)
    except RuntimeError:  # no writable cache location at all: compile once per process instead
        return numba.njit(**flags)(fn)


# the row sum compiled as a function of its own, on 2-D indices (no per-non-zero row views):
# written inline in the prange body it took 2-4x the time per non-zero with rows in cache
_row_sum = _jit(_row_sum)
_kernel = _jit(_spmm_rows, parallel=True)


def spmm_rows(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, x: torch.Tensor,
              start: int, stop: int, *, ahead: int = PREFETCH_AHEAD) -> torch.Tensor:
    """Rows ``start:stop`` of ``A @ x`` as a new float32 (stop - start, F) tensor.

    ``crow`` (N + 1,), ``col`` (nnz,) int32 or int64 and ``values`` (nnz,) float32 are the whole
    matrix's CSR arrays; ``x`` is (N, F) float32 and C-contiguous. ``ahead`` = 0 turns the
    prefetch off (the bench's comparison)."""
    assert x.dtype == torch.float32 and values.dtype == torch.float32 and x.is_contiguous()
    out = torch.empty((stop - start, x.shape[1]), dtype=torch.float32)
    numba.set_num_threads(max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)))
    _kernel(crow.numpy(), col.numpy(), values.numpy(), x.numpy(), out.numpy(), start, stop,
            ahead)
    return out
