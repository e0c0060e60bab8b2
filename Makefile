VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: install engine-deps demo test test-fast docs bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	# The exact pin first: it takes the CPU build on disk instead of gigabytes of CUDA wheels.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test,tf,docs,ray]' torch==2.13.0
	touch $@

install: $(VENV)/.installed

# The engine tier's real Slurm and mpirun: Debian's slurm-wlm and munge (tests/slurm_local.py starts them on
# localhost) and Open MPI's openmpi-bin. Where apt-get cannot install them the tier skips, saying why; in CI
# (CI=true) it fails instead.
engine-deps:
	@{ command -v slurmctld || test -x /usr/sbin/slurmctld; } >/dev/null 2>&1 && \
	  { command -v munged || test -x /usr/sbin/munged; } >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge openmpi-bin; } || \
	  echo "engine-deps: could not install slurm-wlm, munge and openmpi-bin: the engine tier will skip (fail in CI)"

demo: install
	$(VENV)/bin/allgpu demo

test: install engine-deps  # the unit tier first, and nothing more when it fails; then the docs site; then the process
#   tiers, two test files at a time (pytest-xdist): most of their time is replicas waiting (rendezvous, timeouts)
	$(PY) -m pytest -q -m unit
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	$(PY) -m pytest -q -m "not unit" -n 2 --dist loadfile --durations=25

docs: install  # the documentation site into site/ (open site/index.html)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

test-fast: install  # the unit tier: no processes, well under 30 s
	$(PY) -m pytest -q -m unit

bench: install
	$(PY) benchmarks/mirrored_vs_ddp.py

clean:
	rm -rf $(VENV) build site *.egg-info
