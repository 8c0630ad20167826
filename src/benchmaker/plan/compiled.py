"""The planner's per-query inner loops compiled with numba (docs/planner.md, "Speed").

Each query's lookups depend on the reuse counts left by the queries before it, so the search cannot
be batched across queries; with numpy it is ~30 small calls per pool, mostly random gathers of a few
thousand rows. Here each step is one compiled call over the same candidates, in the same order, with
the same arithmetic, so the plans are byte-identical to the numpy path's (``tests/test_plan_golden.py``
runs both):

* ``jaccard_bits`` / ``jaccard_csr``: tag Jaccard of candidates with the seeds' tag set (exact integer
  counts, then one float64 division, as ``Index.jaccard``);
* ``n_differ``: in how many facets each candidate differs from the profile (``Planner._differ``);
* ``pick_lookup``: walk a lookup's candidates best first (Jaccard descending, then image position),
  sorting and checking eligibility (not in the query, under the reuse cap, no duplicate of a seed)
  one chunk at a time as ``candidates._Lookup`` does, and take them as ``Planner._pick`` does (diversity
  cap, reuse counts, images in the query);
* ``pick_order``: ``Planner._pick`` over an explicit order (the easy pool's tiers).

Compiled once per installation into numba's on-disk cache (``cache=True``: beside this file, or
with ``$NUMBA_CACHE_DIR`` set in a folder named by this file's content, :mod:`benchmaker.jit_cache`,
so that any copy of the same file finds it); this module is imported only when a run is large enough to
repay numba's import (:data:`benchmaker.plan.planner.COMPILE_MIN_QUERIES`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..jit_cache import install as _content_keyed_cache

# before the decorators below choose where numba files them: by content, so that a pod's shipped copy
# of this file finds what the image compiled (benchmaker.jit_cache)
_content_keyed_cache()

__all__ = ["records", "jaccard_bits", "jaccard_differ", "jaccard_csr", "n_differ", "differ_in", "eligible_mask",
           "new_lookup", "pick_lookup", "pick_order", "FIRST_CHUNK"]

FIRST_CHUNK = 64  # best-ranked candidates sorted first (then 4x more at a time); eligibility is checked one
#                  candidate at a time as the picking reaches it

_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
_S1, _S2, _S4, _S56 = np.uint64(1), np.uint64(2), np.uint64(4), np.uint64(56)


@intrinsic
def _prefetch(typingctx, arr, i):
    """Ask the CPU to fetch row ``i`` of a 2-D array into the cache (``llvm.prefetch``; no effect on
    results): the candidates are random rows of an N-row table, and reading a few rows ahead keeps
    several memory fetches in flight instead of waiting for each in turn (about 2x on the Jaccard loop)."""
    sig = types.void(arr, i)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        stride = cgutils.unpack_tuple(builder, ary.strides)[0]
        base = builder.bitcast(ary.data, ir.IntType(8).as_pointer())
        ptr = builder.gep(base, [builder.mul(args[1], stride)])
        last = builder.gep(ptr, [builder.sub(stride, context.get_constant(types.intp, 1))])
        i32 = ir.IntType(32)
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]))
        for p in (ptr, last):  # the row's first and last byte: both lines when a row spans two
            builder.call(fn, [p, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, inline="always")
def _popcount(x):
    x = x - ((x >> _S1) & _M1)
    x = (x & _M2) + ((x >> _S2) & _M2)
    x = (x + (x >> _S4)) & _M4
    return np.int64((x * _H01) >> _S56)


_AHEAD = 16  # candidates whose record is prefetched ahead of the one being read
_BINS = 1024  # Jaccard histogram bins for choosing a lookup's next chunk

_LEN = np.uint64(0xFFFFFFFF)
_SHA_OK = np.uint64(1 << 32)
_GROUP_OK = np.uint64(1 << 33)


def records(index) -> tuple[np.ndarray, np.ndarray, int, int]:
    """What the search reads of each image, in one row of uint64 words (one cache line with 150 tags
    and 6 facets), so that a candidate costs one memory access instead of one per array:
    ``[tag bitset words (W)] [sha256 code] [duplicate group code] [tag count | sha ok << 32 | group ok << 33]
    [facet codes]``,
    each row starting a cache line.
    Returns (records, the same memory as small ints (the facet codes), W, where the codes start)."""
    n, nf = index.n, len(index.facet_names)
    nw = index.tag_bits.shape[1] if index.tag_bits is not None else 0
    cdt = np.dtype(np.int16 if max((len(v) for v in index.values), default=0) < 2**15 else np.int32)
    per = 8 // cdt.itemsize
    width = nw + 3 + -(-nf // per)
    buf = np.zeros(n * width + 8, dtype=np.uint64)  # rows aligned to 64 bytes: 8 words = one cache line
    start = (-buf.ctypes.data % 64) // 8
    rec = buf[start:start + n * width].reshape(n, width)
    if nw:
        rec[:, :nw] = index.tag_bits
    rec[:, nw] = index.sha_code
    rec[:, nw + 1] = index.group_code
    rec[:, nw + 2] = (index.tag_len.astype(np.uint64) | (index.sha_ok.astype(np.uint64) << np.uint64(32))
                      | (index.group_ok.astype(np.uint64) << np.uint64(33)))
    small = rec.view(cdt)
    off = (nw + 3) * per
    small[:, off:off + nf] = index.codes
    return rec, small, nw, off


@njit(cache=True, inline="always")
def _jaccard_one(rec, nw, i, ref, n_ref):
    """Jaccard of image ``i``'s tag bitset (``rec`` from :func:`records`) with ``ref`` (W,)."""
    inter = 0
    for w in range(nw):
        inter += _popcount(rec[i, w] & ref[w])
    union = np.int64(rec[i, nw + 2] & _LEN) + n_ref - inter
    return inter / union if union > 0 else 0.0


@njit(cache=True, inline="always")
def _differ_one(small, off, i, cols, prof):
    """In how many facets of ``cols`` image ``i``'s code differs from ``prof``."""
    d = 0
    for c in range(cols.size):
        f = cols[c]
        if small[i, off + f] != prof[f]:
            d += 1
    return d


@njit(cache=True, nogil=True)
def jaccard_bits(rec, nw, idx, ref, n_ref):
    """``Index.jaccard`` with bitsets: ``rec`` from :func:`records`, ``ref`` (W,) the seeds' tag set."""
    out = np.empty(idx.size, dtype=np.float64)
    for k in range(idx.size):
        if k + _AHEAD < idx.size:
            _prefetch(rec, idx[k + _AHEAD])
        out[k] = _jaccard_one(rec, nw, idx[k], ref, n_ref)
    return out


@njit(cache=True, nogil=True)
def jaccard_differ(rec, nw, small, off, idx, ref, n_ref, cols, prof):
    """:func:`jaccard_bits` and :func:`n_differ` in one pass over the candidates' records."""
    out = np.empty(idx.size, dtype=np.float64)
    nd = np.zeros(idx.size, dtype=np.int64)
    for k in range(idx.size):
        if k + _AHEAD < idx.size:
            _prefetch(rec, idx[k + _AHEAD])
        out[k] = _jaccard_one(rec, nw, idx[k], ref, n_ref)
        nd[k] = _differ_one(small, off, idx[k], cols, prof)
    return out, nd


@njit(cache=True, nogil=True)
def jaccard_csr(rec, flat, starts, idx, ref, n_ref):
    """``Index.jaccard`` with tag lists (CSR): ``ref`` a boolean mask over the vocabulary."""
    out = np.empty(idx.size, dtype=np.float64)
    for k in range(idx.size):
        if k + _AHEAD < idx.size:
            _prefetch(rec, idx[k + _AHEAD])
        i = idx[k]
        inter = 0
        s = starts[i]
        n = np.int64(rec[i, 2] & _LEN)
        for t in range(s, s + n):
            if ref[flat[t]]:
                inter += 1
        union = n + n_ref - inter
        out[k] = inter / union if union > 0 else 0.0
    return out


@njit(cache=True, nogil=True)
def n_differ(small, off, idx, cols, prof):
    """Per image of ``idx``, in how many facets of ``cols`` its code differs from ``prof``."""
    out = np.zeros(idx.size, dtype=np.int64)
    for k in range(idx.size):
        if k + _AHEAD < idx.size:
            _prefetch(small, idx[k + _AHEAD])
        out[k] = _differ_one(small, off, idx[k], cols, prof)
    return out


@njit(cache=True, nogil=True)
def differ_in(small, off, idx, f, p):
    """The images of ``idx`` whose facet ``f`` has another code than ``p``."""
    out = np.empty(idx.size, dtype=idx.dtype)
    m = 0
    for k in range(idx.size):
        if k + _AHEAD < idx.size:
            _prefetch(small, idx[k + _AHEAD])
        if small[idx[k], off + f] != p:
            out[m] = idx[k]
            m += 1
    return out[:m].copy()


@njit(cache=True, inline="always")
def _eligible(i, seeds, in_query, usage, reuse_cap, rec, nw):
    """``Planner._ok`` for one image."""
    if in_query[i] or usage[i] >= reuse_cap:
        return False
    fi = rec[i, nw + 2]
    for sd in seeds:
        fs = rec[sd, nw + 2]
        if (fs & _SHA_OK) and (fi & _SHA_OK) and rec[i, nw] == rec[sd, nw]:
            return False
        if (fs & _GROUP_OK) and (fi & _GROUP_OK) and rec[i, nw + 1] == rec[sd, nw + 1]:
            return False
    return True


@njit(cache=True, nogil=True)
def eligible_mask(idx, seeds, in_query, usage, reuse_cap, rec, nw):
    """``Planner._ok``: which images of ``idx`` are eligible."""
    out = np.empty(idx.size, dtype=np.bool_)
    for k in range(idx.size):
        if k + _AHEAD < idx.size:
            _prefetch(rec, idx[k + _AHEAD])
        out[k] = _eligible(idx[k], seeds, in_query, usage, reuse_cap, rec, nw)
    return out


def new_lookup(idx: np.ndarray, j: np.ndarray) -> tuple:
    """The state of one lookup: (idx, j, rest, ordered, meta = [n ordered, n rest, next chunk size])."""
    n = idx.size
    return (idx, j, np.arange(n, dtype=np.int64), np.empty(n, dtype=np.int64),
            np.array([0, n, FIRST_CHUNK], dtype=np.int64))


@njit(cache=True, nogil=True)
def _more(idx, j, rest, ordered, meta):
    """``_Lookup._more``: the next chunk of best-ranked candidates, sorted, appended to ``ordered``
    (eligibility is checked by :func:`pick_lookup` as it reaches them: the same candidates pass, as it
    is fixed for the query but for images entering the query, which picking checks anyway)."""
    n_rest = meta[1]
    if n_rest == 0:
        return False
    size = meta[2]
    if n_rest <= size:
        take = rest[:n_rest].copy()
        meta[1] = 0
    else:
        # the chunk: every candidate whose Jaccard is in the histogram's top bins holding >= size of them
        # (all ties of a value go in together, so the order never depends on where a chunk ends: the
        # chunks differ from _Lookup's, which cuts at the size-th best value, but not the order)
        jb = np.empty(n_rest, dtype=np.int64)
        cnt = np.zeros(_BINS + 1, dtype=np.int64)
        for a in range(n_rest):
            b = np.int64(j[rest[a]] * _BINS)  # j in [0, 1]; times a power of two: exact, so monotone
            jb[a] = b
            cnt[b] += 1
        cut = _BINS
        acc = cnt[cut]
        while acc < size and cut > 0:
            cut -= 1
            acc += cnt[cut]
        take = np.empty(acc, dtype=np.int64)
        t = 0
        r = 0
        for a in range(n_rest):
            if jb[a] >= cut:
                take[t] = rest[a]
                t += 1
            else:
                rest[r] = rest[a]
                r += 1
        meta[1] = r
        meta[2] = size * 4
    # best first: Jaccard descending, then image position (both sorts stable: ties keep their order)
    key = np.empty(take.size, dtype=idx.dtype)
    for a in range(take.size):
        key[a] = idx[take[a]]
    take = take[np.argsort(key, kind="mergesort")]
    neg = np.empty(take.size, dtype=np.float64)
    for a in range(take.size):
        neg[a] = -j[take[a]]
    take = take[np.argsort(neg, kind="mergesort")]
    m = meta[0]
    ordered[m:m + take.size] = take
    meta[0] = m + take.size
    return True


@njit(cache=True, inline="always")
def _take(i, div_codes, div_cap, dkeys, dcounts, dn, in_query, usage):
    """``Planner._pick``'s checks for one candidate: 1 taken, 0 skipped (in the query), -1 diversity cap."""
    if in_query[i]:
        return 0
    if div_codes.size:
        d = div_codes[i]
        slot = -1
        for s in range(dn[0]):
            if dkeys[s] == d:
                slot = s
                break
        if (dcounts[slot] if slot >= 0 else 0) >= div_cap:
            return -1
        if slot < 0:
            slot = dn[0]
            dkeys[slot] = d
            dcounts[slot] = 0
            dn[0] += 1
        dcounts[slot] += 1
    in_query[i] = True
    usage[i] += 1
    return 1


@njit(cache=True, nogil=True)
def pick_lookup(idx, j, rest, ordered, meta, quota, out, seeds, in_query, usage, reuse_cap, rec, nw, div_codes,
                div_cap, dkeys, dcounts, dn):
    """``Planner._pick`` over a lookup, best first: positions into ``idx`` taken into ``out``;
    returns (taken, refused by the diversity cap)."""
    got = 0
    capped = 0
    if quota <= 0:
        return 0, 0
    a = 0
    while True:
        if a == meta[0]:
            if not _more(idx, j, rest, ordered, meta):
                break
            continue
        k = ordered[a]
        a += 1
        if not _eligible(idx[k], seeds, in_query, usage, reuse_cap, rec, nw):
            continue
        r = _take(idx[k], div_codes, div_cap, dkeys, dcounts, dn, in_query, usage)
        if r < 0:
            capped += 1
        elif r > 0:
            out[got] = k
            got += 1
            if got >= quota:
                break
    return got, capped


@njit(cache=True, nogil=True)
def pick_order(idx, order, quota, out, in_query, usage, div_codes, div_cap, dkeys, dcounts, dn):
    """``Planner._pick`` over an explicit order of positions into ``idx``."""
    got = 0
    capped = 0
    if quota <= 0:
        return 0, 0
    for a in range(order.size):
        k = order[a]
        r = _take(idx[k], div_codes, div_cap, dkeys, dcounts, dn, in_query, usage)
        if r < 0:
            capped += 1
        elif r > 0:
            out[got] = k
            got += 1
            if got >= quota:
                break
    return got, capped
