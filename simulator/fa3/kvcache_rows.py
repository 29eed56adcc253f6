"""The rows of a ``flash_attn_with_kvcache`` launch: its queries (one ``[batch, seqlen_q]``
block, or packed sequences with ``cu_seqlens_q``), its new keys (one ``[batch, seqlen_new]``
block, or packed with ``cu_seqlens_k_new``) and its cache lengths, as FA3's ``mha_fwd`` reads
them (hopper/flash_api.cpp; hopper/seqlen.h: a varlen sequence ``b`` owns rows
``cu[b] .. cu[b+1] - 1``). Every launch runs one batch at a time: these classes hand each
batch its rows and put its results where FA3's output layout has them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arrays import to_numpy
from .checks import cu_seqlens, int_array


@dataclass(frozen=True)
class QueryRows:
    """The queries of a launch: ``lengths`` [batch] rows per batch, ``max_len`` the launch's
    seqlen_q (``max_seqlen_q`` when varlen), ``starts`` [batch] first packed row (varlen)."""

    varlen: bool
    batch: int
    max_len: int
    lengths: np.ndarray
    starts: np.ndarray
    total: int

    @classmethod
    def of(cls, q, cu_seqlens_q, max_seqlen_q) -> QueryRows:
        """Read the query layout of ``q`` (after ``to_numpy``).

        Raises:
            ValueError: q not 3-D with ``cu_seqlens_q``; bad offsets; ``max_seqlen_q``
                missing with ``cu_seqlens_q`` (FA3: "max_seqlen_q must be provided if
                cu_seqlens_q is provided") or below a sequence's length; ``max_seqlen_q``
                other than seqlen_q without ``cu_seqlens_q`` (FA3 does not read it then).
        """
        shape = getattr(q, "shape", None)
        if cu_seqlens_q is None:
            if shape is None or len(shape) != 4:  # check_4d names q
                return cls(False, 0, 0, np.zeros(0, np.int64), np.zeros(0, np.int64), 0)
            b, sq = shape[0], shape[1]
            if max_seqlen_q is not None and (isinstance(max_seqlen_q, bool) or not isinstance(
                    max_seqlen_q, (int, np.integer)) or max_seqlen_q != sq):
                raise ValueError(f"max_seqlen_q: FA3 reads it only with cu_seqlens_q; without, "
                                 f"leave it None (q has seqlen_q {sq}), got {max_seqlen_q!r}")
            return cls(False, b, sq, np.full(b, sq, np.int64), np.arange(b) * sq, b * sq)
        if shape is None or len(shape) != 3:
            raise ValueError(f"q: with cu_seqlens_q expected the packed [total_q, heads, head_dim], "
                             f"got {list(shape) if shape is not None else type(q).__name__}")
        cq = cu_seqlens(cu_seqlens_q, "cu_seqlens_q", shape[0])
        lengths = np.diff(cq)
        if max_seqlen_q is None:
            raise ValueError("max_seqlen_q: FA3 requires it with cu_seqlens_q ('max_seqlen_q "
                             "must be provided if cu_seqlens_q is provided')")
        longest = int(lengths.max(initial=0))
        if isinstance(max_seqlen_q, bool) or not isinstance(max_seqlen_q, (int, np.integer)) \
                or max_seqlen_q < max(1, longest):
            raise ValueError(f"max_seqlen_q: expected an int >= every sequence's length "
                             f"({max(1, longest)}), got {max_seqlen_q!r}")
        return cls(True, cq.shape[0] - 1, int(max_seqlen_q), lengths, cq[:-1], shape[0])

    def as_4d(self, q):
        """``q`` with a batch axis (the packed queries as one batch) for the shape checks."""
        return q[None] if self.varlen else q

    def qv_4d(self, qv, head_dim_v: int):
        """``qv`` as :meth:`as_4d` gives q; with cu_seqlens_q it must be [total_q, heads,
        head_dim_v] (mha_fwd's ``CHECK_SHAPE(q_v, total_q, num_heads, head_size_v)``)."""
        if not self.varlen:
            return qv
        if not isinstance(qv, np.ndarray) or qv.ndim != 3:
            raise ValueError(f"qv: with cu_seqlens_q expected [total_q, heads, head_dim_v="
                             f"{head_dim_v}], got {list(getattr(qv, 'shape', []))}")
        return qv[None]

    def batch_rows(self, x, bi: int):
        """Batch ``bi``'s rows of ``x`` (q or qv) as [1, rows, heads, dim]; None for None."""
        return _batch_rows(x, bi, self.varlen, self.starts, self.lengths)

    def outputs(self, heads: int, dv: int, dtype, static: int, no_keys: bool):
        """(out, softmax_lse, out_accum, softmax_lse_accum) in FA3's layouts (mha_fwd), before
        any batch is stored: O = 0; LSE -inf, or +inf when the launch has no key at all (FA3
        skips the kernel); the accums empty (0,) without splits."""
        lse_fill = np.inf if no_keys else -np.inf
        if self.varlen:
            rows = (heads, self.total)
            out = np.zeros((self.total, heads, dv), dtype=dtype)
        else:
            rows = (self.batch, heads, self.max_len)
            out = np.zeros((self.batch, self.max_len, heads, dv), dtype=dtype)
        lse = np.full(rows, lse_fill, dtype=np.float32)
        out_acc = np.zeros((static,) + rows + (dv,) if static > 1 else (0,), np.float32)
        lse_acc = np.full((static,) + rows if static > 1 else (0,), -np.inf, np.float32)
        return out, lse, out_acc, lse_acc

    def store(self, bi: int, o, lse_b, parts, out, lse, out_acc, lse_acc) -> None:
        """Batch ``bi``'s results (o [rows, heads, dv], lse_b [heads, rows], the Split
        kernel's partials ``parts``: ([splits, 1, rows, heads, dv], [splits, 1, heads, rows]))
        into the launch's outputs."""
        if not self.varlen:
            out[bi], lse[bi] = o, lse_b
            for po, pl in parts:
                out_acc[: po.shape[0], bi] = po[:, 0].transpose(0, 2, 1, 3)
                lse_acc[: pl.shape[0], bi] = pl[:, 0]
            return
        r = slice(int(self.starts[bi]), int(self.starts[bi] + self.lengths[bi]))
        out[r], lse[:, r] = o, lse_b
        for po, pl in parts:
            out_acc[: po.shape[0], :, r] = po[:, 0].transpose(0, 2, 1, 3)
            lse_acc[: pl.shape[0], :, r] = pl[:, 0]


@dataclass(frozen=True)
class NewKeys:
    """The keys and values appended by a launch: ``lengths`` [batch] new keys per batch,
    ``starts`` [batch] the first packed row of each batch's."""

    varlen: bool
    lengths: np.ndarray
    starts: np.ndarray

    @classmethod
    def of(cls, kn, vn, cu_seqlens_k_new, batch: int, heads_kv: int, head_dim: int,
           head_dim_v: int, dtype) -> NewKeys:
        """Read and check the new keys ``kn`` / ``vn`` (None: no append).

        Raises:
            ValueError: shapes or dtypes mha_fwd refuses (``CHECK_SHAPE(k_new, ...)``),
                ``cu_seqlens_k_new`` without new keys or not [batch + 1] offsets.
        """
        none = np.zeros(batch, np.int64)
        if kn is None:
            if cu_seqlens_k_new is not None:
                raise ValueError("cu_seqlens_k_new: given without new keys k, v")
            return cls(False, none, none)
        for name, x in (("k", kn), ("v", vn)):  # before any shape is read
            if not isinstance(x, np.ndarray):
                raise ValueError(f"{name}: expected the new keys / values as an array in the "
                                 f"caches' dtype {dtype}, got {type(x).__name__}")
        if cu_seqlens_k_new is None:
            s_new = kn.shape[1] if kn.ndim == 4 else -1
            if kn.ndim != 4 or kn.shape != (batch, s_new, heads_kv, head_dim) or \
                    vn.shape != (batch, s_new, heads_kv, head_dim_v) or kn.dtype != dtype or \
                    vn.dtype != dtype:
                raise ValueError(f"k, v: expected [batch={batch}, seqlen_new, heads_kv={heads_kv}, "
                                 f"head_dim={head_dim}] and [..., head_dim_v={head_dim_v}] in "
                                 f"{dtype}, got {kn.shape} {kn.dtype} / {vn.shape} {vn.dtype}")
            return cls(False, np.full(batch, s_new, np.int64), np.arange(batch) * s_new)
        total = kn.shape[0] if kn.ndim == 3 else -1
        if kn.ndim != 3 or kn.shape != (total, heads_kv, head_dim) or \
                vn.shape != (total, heads_kv, head_dim_v) or kn.dtype != dtype or vn.dtype != dtype:
            raise ValueError(f"k, v: with cu_seqlens_k_new expected [total_k_new, heads_kv="
                             f"{heads_kv}, head_dim={head_dim}] and [..., head_dim_v={head_dim_v}] "
                             f"in {dtype}, got {kn.shape} {kn.dtype} / {vn.shape} {vn.dtype}")
        cn = cu_seqlens(cu_seqlens_k_new, "cu_seqlens_k_new", total)
        if cn.shape[0] != batch + 1:
            raise ValueError(f"cu_seqlens_k_new: expected {batch + 1} offsets (batch + 1), got "
                             f"{cn.shape[0]}")
        return cls(True, np.diff(cn), cn[:-1])

    def batch_rows(self, x, bi: int):
        """Batch ``bi``'s new rows of ``x`` (k or v) as [1, rows, heads_kv, dim]; None for None."""
        return _batch_rows(x, bi, self.varlen, self.starts, self.lengths)


def _batch_rows(x, bi: int, varlen: bool, starts: np.ndarray, lengths: np.ndarray):
    """Batch ``bi``'s rows of ``x``: ``x[bi]`` of a [batch, rows, ...] block, or rows
    ``starts[bi] ..`` of a packed [total, ...] array; with a leading axis of 1. None for None."""
    if x is None:
        return None
    if not varlen:
        return x[bi: bi + 1]
    return x[None, starts[bi]: starts[bi] + lengths[bi]]


def cache_lengths(cache_seqlens, q, batch: int, seqlen_cache: int, varlen_q: bool) -> np.ndarray:
    """int64 [batch] keys in the cache per batch: ``cache_seqlens`` (an int for all, or int32
    [batch]), default the whole cache.

    Raises:
        ValueError: an int outside 0..seqlen_cache; an int with ``cu_seqlens_q`` where
            q.shape[0] (total_q) is not the batch (FA3's interface expands an int to
            ``q.shape[0]`` values, which mha_fwd then refuses); a bad array.
    """
    if cache_seqlens is None:
        return np.full(batch, seqlen_cache, np.int64)
    if isinstance(cache_seqlens, (int, np.integer)) and not isinstance(cache_seqlens, bool):
        if not 0 <= cache_seqlens <= seqlen_cache:
            raise ValueError(f"cache_seqlens: expected 0..{seqlen_cache} (the cache length), "
                             f"got {cache_seqlens}")
        if varlen_q and q.shape[0] != batch:
            raise ValueError(f"cache_seqlens: with cu_seqlens_q FA3's interface expands an int to "
                             f"q.shape[0] = {q.shape[0]} values (total_q), not batch = {batch}; "
                             f"pass an int32 [batch] array")
        return np.full(batch, int(cache_seqlens), np.int64)
    return int_array(to_numpy(cache_seqlens, "cache_seqlens")[0], "cache_seqlens", batch)
