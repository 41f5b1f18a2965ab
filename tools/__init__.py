"""The course's tools: benchmarks and sweeps on a GPU, compiled SASS on a CPU, the quoted figures, notebook chores.

Run from the repository root, each as a module (its docstring says more):

    python -m tools.bench [--quick] [CHAPTER ...]      make bench: solution kernels beside PyTorch's paths (GPU);
                                                       benchmarks.py holds what it times per chapter
    python -m tools.figures [--write]                  make figures: the H200 figures the docs and notebooks quote
    python -m tools.notebook_format [--check] PATH ... make format: notebooks without outputs
    python -m tools.run_all [CHAPTER ...]              Run All on the solution notebooks, each cell's time
    python -m tools.sass [--fit | --sweep | --tma]     what a kernel's loop issues, compiled for any GPU (no GPU)
    python -m tools.sweep_decode                       graph-timed sweeps on a GPU: the 4-bit decode candidates,
    python -m tools.sweep_expert                       the expert W4A16 decode's configs,
    python -m tools.sweep_mma                          the Gluon MMA decodes,
    python -m tools.sweep_prefill --parts ...          the prefill candidates and GEMMs
    python -m tools.timing_protocol                    the trusted grader's timing against in-process replay (GPU)
    python -m tools.parallel_grading cpu|gpu|model     parallel grading's throughput and the class-time model
    python -m tools.peer_numerics                      why gemlite's W4A16 rows miss the benchmark's recheck (GPU)
    python -m tools.capstone_h200                      the capstone's figures on a GPU
    python -m tools.capstone_oracle                    tests/data/capstone_oracle.json, from the libraries it names
"""
