"""Device check of the real library's call conventions (fa3-fwd 0.0.3) against ``simulator.fa3``:
``flash_attn_with_kvcache(..., return_softmax_lse=True)`` (tuple length, shapes, dtypes, the
bits of out, softmax_lse and of out_accum / softmax_lse_accum where the Split kernel writes
them), and ``flash_attn_qkvpacked_func`` in both packed layouts (out / lse bits).

Run on the H200 with the wheel importable (its ``fa3_fwd_interface.py`` and ``fa3_fwd/_C.abi3.so``
on PYTHONPATH, ``fa3_fwd_config.py`` also as ``flash_attn_config.py``)::

    PYTHONPATH=<wheel folder>:$PWD python3 scripts/fa3_api_conventions_check.py

Writes ``$OUT/api_conventions_check.json`` (committed as
``simulator/data/device/fa3_api_conventions_check.json``).
"""

from __future__ import annotations

import json
import os

import fa3_fwd_interface as lib
import ml_dtypes
import numpy as np
import torch

from simulator import fa3

#: (batch, seqlen_q, heads, heads_kv, cache length, num_splits, cache_seqlens or None)
CASES = [(2, 1, 8, 2, 1500, 3, None), (2, 4, 8, 8, 3000, 4, None),
         (3, 1, 16, 2, 2048, 0, [100, 2000, 1500]), (1, 1, 8, 1, 4096, 0, None),
         (2, 1, 8, 2, 700, 1, None), (2, 2, 4, 4, 900, 5, [900, 300])]


def _gpu(x):
    return torch.from_numpy(x.view(np.uint16).copy()).view(torch.bfloat16).cuda()


def _compare(lg, em) -> dict:
    r = {"lib_len": len(lg), "emu_len": len(em),
         "lib_shapes": [list(x.shape) for x in lg], "emu_shapes": [list(x.shape) for x in em],
         "lib_dtypes": [str(x.dtype) for x in lg], "emu_dtypes": [str(x.dtype) for x in em],
         "out_equal": bool(np.array_equal(lg[0].view(torch.int16).numpy(), em[0].view(np.int16))),
         "lse_equal": bool(np.array_equal(lg[1].numpy().view(np.uint32), em[1].view(np.uint32)))}
    if len(lg) == 4 and lg[2].numel() and lg[2].shape == em[2].shape:
        written = em[3] != -np.inf  # the partial rows the Split kernel writes
        wo = np.broadcast_to(written[..., None], em[2].shape)
        r["lse_accum_written_equal"] = bool(np.array_equal(lg[3].numpy()[written].view(np.uint32),
                                                           em[3][written].view(np.uint32)))
        r["out_accum_written_equal"] = bool(np.array_equal(lg[2].numpy()[wo].view(np.uint32),
                                                           em[2][wo].view(np.uint32)))
        r["written_rows"], r["rows"] = int(written.sum()), int(written.size)
    return r


def main() -> None:
    rng = np.random.default_rng(11)
    res = []
    for i, (b, sq, h, hk, sk, splits, lens) in enumerate(CASES):
        q = rng.standard_normal((b, sq, h, 128)).astype(ml_dtypes.bfloat16)
        kc, vc = (rng.standard_normal((b, sk, hk, 128)).astype(ml_dtypes.bfloat16) for _ in range(2))
        cs = None if lens is None else np.asarray(lens, np.int32)
        got = lib.flash_attn_with_kvcache(_gpu(q), _gpu(kc), _gpu(vc), num_splits=splits,
                                          cache_seqlens=None if cs is None else torch.from_numpy(cs).cuda(),
                                          return_softmax_lse=True)
        torch.cuda.synchronize()
        em = fa3.flash_attn_with_kvcache(q, kc.copy(), vc.copy(), cache_seqlens=cs,
                                         num_splits=splits, return_softmax_lse=True)
        r = {"case": i, **_compare([g.cpu() for g in got], em)}
        res.append(r)
        print(json.dumps(r), flush=True)
    packed = [_packed(rng, i, *c) for i, c in enumerate(PACKED)]
    for r in packed:
        print(json.dumps(r), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "api_conventions_check.json"), "w") as f:
        json.dump({"kvcache": res, "qkvpacked": packed}, f, indent=1)


#: qkvpacked calls: (shape of qkv, num_heads_q or None, causal, window_size); the wheel is built
#: without local windows
PACKED = [((2, 300, 3, 4, 128), None, True, (-1, -1)), ((1, 257, 8 + 2 * 2, 64), 8, False, (-1, -1)),
          ((3, 129, 3, 2, 96), None, False, (-1, -1)), ((1, 500, 4 + 2 * 1, 128), 4, True, (-1, -1))]


def _packed(rng, i, shape, heads_q, causal, window) -> dict:
    qkv = rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    lo, ll = lib.flash_attn_qkvpacked_func(_gpu(qkv), causal=causal, window_size=window,
                                           num_heads_q=heads_q, return_attn_probs=True)
    torch.cuda.synchronize()
    eo, el = fa3.flash_attn_qkvpacked_func(qkv, causal=causal, window_size=window,
                                           num_heads_q=heads_q, return_attn_probs=True)
    return {"case": i, "shape": list(shape), "num_heads_q": heads_q,
            "out_equal": bool(np.array_equal(lo.cpu().view(torch.int16).numpy(), eo.view(np.int16))),
            "lse_equal": bool(np.array_equal(ll.cpu().numpy().view(np.uint32), el.view(np.uint32)))}


if __name__ == "__main__":
    main()
