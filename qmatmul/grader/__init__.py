"""The trusted grader: every graded verdict is decided here, outside the process that runs the learner's code.

notebook  reads a notebook's cells and their nbgrader roles (the one place that does)
static/   reads the learner's source: own Triton kernel launched? constructs that escape the audit? the course's
          answers used? (syntax, escapes, source, sizes, input_checks, own_kernel, course_use)
worker    the untrusted process: runs the learner's cells, answers calls with data
remote    the trusted side of that process: start it isolated (stated import path, a scratch folder, one time
          budget), call with a timeout, mirror results without following links, kill
zygote    on a CPU in plain mode, workers forked from an interpreter that has imported torch, triton and IPython
          (started as a worker is): half a notebook's grading time there was two interpreters' imports
freeze    the worker's and the notebook kernel's processes stopped between their jobs and cells
protocol  the timing protocol's trusted side: timed goes in the GPU's exclusive window, the counted go checked
files     the worker's folder, read and written never through a link (arguments out, results back)
results   a call's results on the trusted side: arguments written back, `out` mapped, RemoteObject
kernels   "a kernel of your own", proven: launches observed, each compiled by Triton's front end for a GPU
reach     which of the course's own functions a graded call ran, by the file their code lives in
trusted   grades one notebook: each test cell's checks run here, on the learner's functions as proxies
nbhooks   nbgrader preprocessors that put the trusted verdicts into the gradebook
jobs      one grading job (a command to its end or timeout), as the parallel pool and Dask workers run it
"""
