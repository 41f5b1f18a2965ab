"""Adversarial: the capture handed to the course package's own helper (qmatmul.timing.capture, what the grader
times with), which the chapter does not give. The grader reads which course names the learner's code uses
and awards nothing for work the course did.

expect[cpu] test_capture: 0 / Performance not measured
expect[gpu] test_capture: 0 / qmatmul
"""


# %% ex5_capture
def capture(step, *example):
    """step(*example) recorded once as a CUDA graph; returns replay(*inputs)."""
    from qmatmul import timing

    static = [x.clone() for x in example]
    graph, outputs = timing.capture(lambda: step(*static))

    def replay(*inputs):
        for buf, x in zip(static, inputs, strict=True):
            buf.copy_(x)
        graph.replay()
        return outputs

    return replay
