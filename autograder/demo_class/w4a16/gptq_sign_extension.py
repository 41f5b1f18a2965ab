"""Unpacks GPTQ's int32 words with `>>` and masks every field but the top one, assuming `word >> 28` is 0..15.
int32 is signed: the shift is arithmetic, and a top nibble of 8..15 comes out as -8..-1. In the packed bytes the
wrap to uint8 happens to hide it; the zero points of n % 8 == 7 come out wrong.

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
expect[cpu] test_decode_bandwidth: 0 / Performance not measured
expect[gpu] test_decode_bandwidth: 3 /
expect test_unpack_magic: 1 /
expect test_from_gptq: 0 / sign: used arithmetic shift on int32
"""


# %% ex5_from_gptq
def from_gptq(qweight, qzeros, scales, group_size):
    K, N = w4a16.gptq_prepare(qweight, qzeros, scales, group_size)

    def fields(words, dim):
        parts = [(words >> (4 * j)) & 0xF for j in range(7)]
        parts.append(words >> 28)  # wrong: arithmetic shift, -8..-1 when the top nibble is 8..15
        return torch.stack(parts, dim=dim + 1).flatten(dim, dim + 1)

    q = fields(qweight, 0).T  # [N, K]
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8).contiguous()
    z = fields(qzeros, 1) + 1  # [K/G, N]
    return packed, scales.float().T.contiguous(), z.T.to(torch.uint8).contiguous()
