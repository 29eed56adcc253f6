"""Why batch size changes PyTorch SDPA's flash output: FlashAttention-2's split-KV count by batch
and GPU (simulator.fa2.plan_forward), for a decode step (1 query row, 8 heads, head dim 128)
and a short prefill. A different split count is a different summation order, so different bits
for the same row (docs/sdpa.md prints this table).

    python scripts/fa2_split_counts.py
"""

from simulator.fa2 import plan_forward


def main() -> None:
    print("| seqlen_q x seqlen_k | batch | splits (H100 SXM, 132 SMs) | splits (H100 PCIe, 114 SMs) |")
    print("| --- | --- | --- | --- |")
    for sq, sk in ((1, 4096), (128, 4096)):
        for batch in (1, 2, 4, 8, 16, 32):
            counts = [plan_forward(batch, sq, sk, 8, 8, 128, causal=False, gpu=g).num_splits
                      for g in ("h100", "h100-pcie")]
            print(f"| {sq} x {sk} | {batch} | {counts[0]} | {counts[1]} |")


if __name__ == "__main__":
    main()
