"""The roofline: the time a kernel cannot beat, from the bytes it must move and the FLOPs it must do."""

from __future__ import annotations

from dataclasses import dataclass

# Measured on the course's lent H200 (see docs/benchmark-h200.md): used as data where no GPU is present.
H200 = {
    "gpu": "NVIDIA H200 (sm_90)",
    "date": "2026-11-29",
    "versions": "torch 2.11.0+cu130, triton 3.6.0",
    "copy_bandwidth": 4.25e12,  # bytes/s, read + written
    "bf16_flops": 720e12,  # FLOP/s, cuBLAS 8192^3
    "fp8_flops": 1300e12,  # FLOP/s, torch._scaled_mm 8192^3
}


@dataclass
class Ceilings:
    name: str
    copy_bandwidth: float  # bytes/s
    matmul_flops: float  # FLOP/s in the chapter's activation dtype
    measured: bool  # False: recorded figures of another GPU

    def describe(self) -> str:
        how = (
            "measured now"
            if self.measured
            else f"recorded on {H200['date']} with {H200['versions']}; no GPU here"
        )
        return (
            f"{self.name}: copy {self.copy_bandwidth / 1e12:.2f} TB/s, dense matmul "
            f"{self.matmul_flops / 1e12:.0f} TFLOP/s ({how})"
        )


def ceilings(env) -> Ceilings:
    """The two ceilings of this GPU, measured in this process; the H200's recorded figures on a CPU."""
    if env.has_gpu:
        from qmatmul import bench

        return Ceilings(env.gpu_name, bench.copy_bandwidth(), bench.matmul_flops(dtype=env.act_dtype), True)
    return Ceilings(H200["gpu"], H200["copy_bandwidth"], H200["bf16_flops"], False)


def floor_seconds(nbytes: float, nflops: float, ceil: Ceilings) -> tuple[float, str]:
    t_mem, t_math = nbytes / ceil.copy_bandwidth, nflops / ceil.matmul_flops
    return max(t_mem, t_math), ("memory" if t_mem >= t_math else "compute")


def print_predictions(ceil: Ceilings, rows) -> None:
    """rows: (label, nbytes, nflops). Prints bytes, intensity and the floor time of each."""
    print(ceil.describe())
    ridge = ceil.matmul_flops / ceil.copy_bandwidth
    print(f"ridge point: {ridge:.0f} FLOP/byte (below it a kernel is memory-bound)")
    print(f"{'':<34}{'MB moved':>10}{'FLOP/byte':>11}{'floor':>12}  bound")
    for label, nbytes, nflops in rows:
        t, bound = floor_seconds(nbytes, nflops, ceil)
        print(f"{label:<34}{nbytes / 1e6:>10.1f}{nflops / nbytes:>11.1f}{t * 1e6:>10.1f} µs  {bound}")
