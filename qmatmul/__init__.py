"""qmatmul: the support package of the quantized-matmul Triton workbook.

Importing this package imports neither torch nor triton: `qmatmul.environment.start()` must be able to
choose the Triton interpreter before triton is imported.
"""

__version__ = "0.1.0"
