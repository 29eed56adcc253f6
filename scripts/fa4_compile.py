"""Compile FlashAttention-4's sm90 kernels (flash-attn-4's ``flash_attn.cute``, CuTe DSL) on a
machine without a GPU and keep their PTX and cubin, the evidence behind the FA4 rules of
``simulator/flash/softmax_fa4.py`` and ``simulator/flash/backward_fa4.py``.

Run by ``scripts/fa4_ptx.sh`` (which makes the environment); directly::

    FLASH_ATTENTION_ARCH=90 CUTE_DSL_ARCH=sm_90a FLASH_ATTENTION_NUM_SMS=132 \\
    CUTE_DSL_KEEP=ptx,cubin CUTE_DSL_DUMP_DIR=OUT python fa4_compile.py fwd|bwd HEAD_DIM \\
        [causal] [softcap] [sink] [f16]

The tensors are torch FakeTensors on "cuda" (FA4's interface compiles without running when
torch's fake mode is active); CuTe DSL writes one .ptx / .cubin per kernel into the existing
folder CUTE_DSL_DUMP_DIR. The backward also compiles its preprocess and postprocess kernels
(the non-deterministic kernel: the deterministic one allocates its semaphores on the GPU;
its arithmetic is the same; the launch then fails without a GPU, after the files are written).
"""

import sys

import torch
from flash_attn.cute import interface
from torch._subclasses.fake_tensor import FakeTensorMode


def main(argv):
    kind, hd, flags = argv[0], int(argv[1]), set(argv[2:])
    dt = torch.float16 if "f16" in flags else torch.bfloat16
    with FakeTensorMode(allow_non_fake_inputs=True):
        def t(*shape, dtype=dt):
            return torch.empty(*shape, dtype=dtype, device="cuda")
        q, k, v, o, do = (t(1, 256, 4, hd) for _ in range(5))
        if kind == "fwd":
            interface._flash_attn_fwd(
                q, k, v, causal="causal" in flags, return_lse=True, _arch=90,
                softcap=5.0 if "softcap" in flags else None,
                learnable_sink=t(4, dtype=torch.float32) if "sink" in flags else None)
        else:
            interface._flash_attn_bwd(
                q, k, v, o, do, t(1, 4, 256, dtype=torch.float32), causal="causal" in flags,
                deterministic=False, softcap=5.0 if "softcap" in flags else 0.0,
                learnable_sink=t(4, dtype=torch.float32) if "sink" in flags else None)


if __name__ == "__main__":
    main(sys.argv[1:])
