"""Reads the GPTQ codes and scales right but takes qzeros' nibbles as the zero points: it forgot that the v1
checkpoint format stores zero − 1. Every dequantized weight of the checkpoint is off by one scale.

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
expect[cpu] test_decode_bandwidth: 0 / Performance not measured
expect[gpu] test_decode_bandwidth: 3 /
expect test_unpack_magic: 1 /
expect test_from_gptq: 0 / zero offset: forgot the +1 of GPTQ's stored zeros
"""


# %% ex5_from_gptq
def from_gptq(qweight, qzeros, scales, group_size):
    K, N = w4a16.gptq_prepare(qweight, qzeros, scales, group_size)
    shifts = 4 * torch.arange(8, dtype=torch.int32)
    q = ((qweight[:, None, :] >> shifts[None, :, None]) & 0xF).reshape(K, N).T
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8).contiguous()
    z = ((qzeros[:, :, None] >> shifts[None, None, :]) & 0xF).reshape(K // group_size, N)
    zeros = z.T.to(torch.uint8).contiguous()  # wrong: v1 stores zero - 1; the zero point is z + 1
    return packed, scales.float().T.contiguous(), zeros
