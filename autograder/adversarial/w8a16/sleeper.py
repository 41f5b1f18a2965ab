"""A quantizer cell that sleeps for an hour. Before, each test cell started a fresh worker that ran the cells
again and waited 300 s for them: the serial class was held for 20 minutes. Now the notebook has one time
budget (QMATMUL_NOTEBOOK_BUDGET) for the run of its cells and the trusted grading together; once it is spent,
every remaining cell fails at once, naming the budget. Graded by a test of its own with a short budget
(tests/test_adversarial.py), not with the rest of the corpus.

expect test_quantizer: 0 / time budget
expect test_prefill: 0 / time budget
expect test_decode: 0 / time budget
expect test_decode_bandwidth: 0 /
"""

# %% ex1_quantizer
import time

time.sleep(3600)


def quantize_int8_per_channel(w):
    w = w.float()
    amax = w.abs().amax(dim=1)
    s = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    q = torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8)
    return q, s
