"""Honest: a capture written another way, and safer for a caller who keeps results: two warm-up calls, the inputs
captured on fresh buffers allocated with torch.empty_like, and a replay that returns copies of the graph's outputs
(seven small copies a step, well inside what the check allows). It earns full marks.

expect[cpu] test_capture: 0 / Performance not measured
expect[gpu] test_capture: 2 /
"""


# %% ex5_capture
def capture(step, *example):
    """step(*example) recorded once as a CUDA graph; returns replay(*inputs)."""
    inputs = [torch.empty_like(x) for x in example]
    for buf, x in zip(inputs, example, strict=True):
        buf.copy_(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(*inputs)

    def replay(*new):
        for buf, x in zip(inputs, new, strict=True):
            buf.copy_(x)
        g.replay()
        return tuple(y.clone() for y in out)

    return replay
