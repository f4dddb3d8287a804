# From PyTorch to production, fast -- one Makefile for readers, teachers and CI.
#   make book   create the environment if missing, execute every chapter, render _build/html
#   make test   create the environment if missing, unit tests + every notebook executed by nbval
#   make lab    JupyterLab on the course (headless; LAB_IP, LAB_PORT, LAB_TOKEN; works as root)
#   make kernel register the environment as the Jupyter kernel "course" (MODE= pins a mode; NO_GPU=1)
#   make setup  only the environment (idempotent; WHEELHOUSE=dir installs offline from make wheelhouse)
#   make doctor check this machine before installing: a table of what is found, needed, how to fix
#   make restore after a rental instance is re-created from its data disk: system packages, kernel
#   make audit  known vulnerabilities of the installed environment (pip-audit; needs the internet)
#   make wheelhouse  download every pinned package once into WHEELHOUSE (default wheelhouse/)
#   make check  ruff (lint + format) and the page/package single-source check
#   make bench  full-mode run of every chapter into results/reference/<machine>/ (readers with a GPU)
#   make fullcpu  full-mode sizes on this CPU, fewest repeats: time and memory per chapter (hours)
#   make trainproxy  full mode's training recipes at full steps, 64 px images, on this CPU (~40 min)
#   make ladder MODEL=mobilenet_v3_small  chapter 10's ladder on your classifier (or pkg.mod:fn)
#   make clean  remove the rendered book, your ledger and the chapters' exported models (make distclean: and .venv)
# COURSE_MODE=quick|full picks problem sizes (default: full where GPU memory and RAM fit it, else quick).
# VENV=dir (a conda environment: VENV=$CONDA_PREFIX) given once to make setup is remembered.

SHELL := /bin/bash
.DEFAULT_GOAL := help
# This clone's own settings, written by make and never committed: the environment given once with
# `make setup VENV=dir` (a conda environment on a rental's data disk), so that `make lab`, `book`,
# `test` use it too instead of building a second 13 GB .venv; and how `make kernel` registered the
# Jupyter kernel, so that `make restore` can register it again. VENV= on a command line still wins;
# delete the file to forget both.
LOCAL_MK ?= .course-local.mk
-include $(LOCAL_MK)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.course-installed
# TensorRT for onnxruntime-gpu's TensorRT execution provider (chapters 7-8), on NVIDIA machines only:
# ORT 1.23.2's libonnxruntime_providers_tensorrt.so needs libnvinfer.so.10 (TensorRT 10; ORT's build
# matrix names 10.9 for CUDA 12). The tensorrt-cu12 package on PyPI is a small source package that
# downloads NVIDIA's libraries from NVIDIA's own package index while it installs. `make setup` tries it
# when nvidia-smi sees a GPU and carries on without it if that fails (chapters 7-8 then print a skip
# line); `make setup GPU=1` insists and stops with the reason.
TENSORRT := tensorrt-cu12==10.9.0.34
TRT_STAMP := $(VENV)/.course-tensorrt
GPU_SEEN := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
GPU ?=
MODE ?=
NO_GPU ?=
# What `make setup` installs besides requirements.txt; `make wheelhouse` downloads the same list.
# pip >= 26.2: every pip before it has published vulnerabilities (the last, CVE-2026-13346, was fixed
# in 26.2; pip < 25 has six). Below 27: a new year's pip can drop old build paths (25.3 dropped the
# legacy setup.py build paths), so it is tried with flowvision's build before it is let in: pip 26.3
# with setuptools 80.10 builds flowvision 0.2.1 with --no-build-isolation, from PyPI and from a
# wheelhouse (checked in a fresh venv, 2026-12). setuptools < 81: flowvision's setup.py imports
# pkg_resources, which 81 removed; >= 78.1.1: the fix for CVE-2025-47273 (a fresh Python 3.10 venv
# starts with setuptools 65.5, which has it and two older ones).
BOOTSTRAP := "pip>=26.2,<27" "setuptools>=78.1.1,<81" wheel
FLOWVISION := flowvision==0.2.1
ONEFLOW_ONNX := oneflow-onnx==0.6.2
# Workshop rooms: `make wheelhouse` (with network, once) then `make setup WHEELHOUSE=dir` (no network).
WHEELHOUSE ?=
FROM_WHEELHOUSE := $(if $(WHEELHOUSE),--no-index --find-links $(abspath $(WHEELHOUSE)),)
RUN_ENV := $(if $(MODE),COURSE_MODE=$(MODE),) PYTHONHASHSEED=0 OMP_WAIT_POLICY=PASSIVE

# Python 3.10 (OneFlow 0.9.0 has wheels for 3.7-3.10 only): PATH first, then pyenv's versions folder.
PYTHON310 ?= $(shell for p in python3.10 $$HOME/.pyenv/versions/3.10*/bin/python3.10 /usr/local/bin/python3.10 /usr/bin/python3.10; do \
	if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1; then command -v $$p; break; fi; done)

.PHONY: help setup book test test-unit test-notebooks lab bench fullcpu trainproxy ladder clean distclean check doctor \
  wheelhouse kernel restore audit

help:
	@sed -n '2,18p' Makefile | sed 's/^# //'

# The doctor runs before anything is installed, so with the course's Python if it exists, else the system's.
# It is told where `make kernel` registered the kernel (KERNEL_SPEC, remembered in $(LOCAL_MK)).
DOCTOR = $(or $(wildcard $(PY)),$(shell command -v python3),$(PYTHON310)) tools/doctor.py --venv $(VENV) \
  --python310 "$(PYTHON310)" --kernel-spec "$(KERNEL_SPEC)"

doctor:
	@$(if $(and $(filter file,$(origin VENV)),$(filter-out .venv,$(VENV))),echo "VENV=$(VENV) (remembered in $(LOCAL_MK))";)
	@$(DOCTOR)

$(PY):
	@if [ -z "$(PYTHON310)" ]; then \
	  $(DOCTOR) || true; \
	  echo "ERROR: Python 3.10 not found (needed by oneflow 0.9.0)."; \
	  echo "Install it, e.g. 'pyenv install 3.10.13', 'apt-get install python3.10 python3.10-venv',"; \
	  echo "or use conda: 'conda env create -f environment.yml' then 'make setup VENV=\$$CONDA_PREFIX'."; \
	  exit 1; fi
	@echo "Creating $(VENV) with $(PYTHON310)"
	$(PYTHON310) -m venv $(VENV)
	@echo "created by the course Makefile; make distclean may delete this environment" > $(VENV)/.course-created

# make doctor first: it stops only for what blocks the install (FAIL rows); warnings name what gets skipped.
# nvidia-pytriton needs glibc >= 2.35 (tools/doctor.py says why): on older images (Ubuntu 20.04) the
# rest installs without it; chapters 9 and 9b stop at their first cell with the reason (make test skips them).
# pip's cache and temporary files follow the environment onto its disk when ~/.cache and /tmp live on
# another one (a rental's small system disk): PIP_DIRS, from tools/check_disk.sh --pip-dirs.
PIP_DIRS = $(shell bash tools/check_disk.sh --pip-dirs $(abspath $(VENV)))
IPIP = $(if $(strip $(PIP_DIRS)),env $(PIP_DIRS) )$(PIP)
INSTALL = $(IPIP) install --disable-pip-version-check $(FROM_WHEELHOUSE)
$(STAMP): requirements.txt pyproject.toml | $(PY)
	@$(DOCTOR)
	@$(foreach d,$(PIP_DIRS),mkdir -p $(lastword $(subst =, ,$(d))) && echo "pip uses $(d) (the environment's disk)";) true
	@$(if $(strip $(PIP_DIRS)),env $(PIP_DIRS) )bash tools/check_disk.sh $(VENV)
	$(INSTALL) --quiet $(BOOTSTRAP)
	@req=requirements.txt; if ! $(PY) tools/doctor.py --serving-ok; then \
	  req=$(VENV)/requirements-without-triton.txt; grep -v '^nvidia-pytriton' requirements.txt > $$req; \
	  echo "NOTE: glibc older than 2.35: installing without nvidia-pytriton; chapters 9 and 9b cannot run here."; fi; \
	echo "$(INSTALL) -r $$req"; \
	$(INSTALL) -r $$req
	# flowvision 0.2.1 is an sdist whose setup.py imports pkg_resources: built with our setuptools<81;
	# oneflow-onnx (a wheel) without its unpinned dependencies, which would upgrade numpy/protobuf.
	$(INSTALL) --no-build-isolation --no-deps $(FLOWVISION) $(ONEFLOW_ONNX)
	$(IPIP) install --disable-pip-version-check --no-index --no-deps --no-build-isolation -e .
	bash tools/install_system_deps.sh
	$(PY) -c "import torch, torchvision, oneflow, flowvision, onnxruntime, openvino, helpers; print('environment OK')"
	@rm -rf $(VENV)/.pip-tmp; if [ -d $(VENV)/.pip-cache ]; then echo "pip's cache: $$(du -sh $(VENV)/.pip-cache \
	  | cut -f1) in $(VENV)/.pip-cache (speeds up a reinstall; rm -rf it to free the space)"; fi
	touch $(STAMP)

$(TRT_STAMP): | $(STAMP)
	@if $(PIP) install --disable-pip-version-check "$(TENSORRT)" $(FROM_WHEELHOUSE) \
	   && $(PY) -c "import tensorrt; print('TensorRT', tensorrt.__version__, 'for ONNX Runtime\'s TensorRT EP')"; then \
	  touch $(TRT_STAMP); \
	else \
	  echo "TensorRT could not be installed: its libraries come from NVIDIA's package index, which pip must reach"; \
	  echo "(a PyPI mirror alone is not enough). Chapters 7-8 print a skip line for their TensorRT steps."; \
	  if [ "$(GPU)" = 1 ]; then exit 1; fi; \
	fi

# Everything the $(STAMP) recipe installs, downloaded once (network needed here only). Copy the folder to
# the room's machines (a hub, a USB stick), then `make setup WHEELHOUSE=that/folder` installs with
# --no-index: nothing from the network. TensorRT is not included (NVIDIA's index serves its libraries).
WHEELHOUSE_DIR = $(abspath $(or $(WHEELHOUSE),wheelhouse))
DOWNLOAD = $(PIP) download --disable-pip-version-check -d $(WHEELHOUSE_DIR)
wheelhouse: | $(PY)
	$(DOWNLOAD) $(BOOTSTRAP)
	$(DOWNLOAD) -r requirements.txt
	$(DOWNLOAD) --no-build-isolation --no-deps $(FLOWVISION) $(ONEFLOW_ONNX)
	@echo "wheelhouse: $$(ls $(WHEELHOUSE_DIR) | wc -l) files, $$(du -sh $(WHEELHOUSE_DIR) | cut -f1) in $(WHEELHOUSE_DIR)"
	@echo "install from it with no network: make setup WHEELHOUSE=$(WHEELHOUSE_DIR)"

# A VENV given on the command line (or in the environment) is remembered for the next make commands;
# VENV=.venv forgets it.
setup: $(STAMP) $(if $(filter 1,$(GPU) $(GPU_SEEN)),$(if $(filter 0,$(GPU)),,$(TRT_STAMP)))
	@$(if $(filter command line environment,$(origin VENV)),bash tools/remember.sh $(LOCAL_MK) VENV \
	  $(if $(filter $(abspath .venv),$(abspath $(VENV))),,$(abspath $(VENV))))

# Four pytest processes, each run once: test-unit's unit tests without OneFlow, then the OneFlow
# tests in a process of their own; then the notebooks: nbval executes each once into the book's
# execution cache (conftest.py), so tests/book renders them without executing again and checks every
# page in Chromium. Each notebook starts cold (COURSE_COLD_START=1: an empty ledger folder of its own,
# no notebooks/artifacts), as for a participant who opens one chapter of a fresh clone; nbval records
# each one's wall time and peak memory in _build/nbval_times/ (conftest.py). The OneFlow split is not
# a crash guard (nn.Graph's native crashes were a race in OneFlow 0.9.0's launcher, fixed before
# OneFlow starts by helpers/core/oneflow_fix.py): it keeps OneFlow's runtime threads (its VM scheduler
# spins between instructions) off the PyTorch tests' cores, and shows those tests need no OneFlow
# (tests/conftest.py fails the no-oneflow test after which OneFlow is loaded; README.md says which
# group guards what).
UNIT := $(PY) -m pytest -q tests --ignore=tests/book
NBVAL = $(PY) -m pytest -q -rs notebooks --nbval-lax --nbval-cell-timeout=900
test: test-unit
	$(RUN_ENV) COURSE_COLD_START=1 $(NBVAL)
	$(RUN_ENV) $(PY) -m pytest -q tests/book

test-unit: setup
	$(RUN_ENV) COURSE_TEST_GROUP=no-oneflow $(UNIT)
	$(RUN_ENV) COURSE_TEST_GROUP=oneflow $(UNIT)

test-notebooks: setup
	$(RUN_ENV) $(NBVAL)

# Repository links and launch buttons come from COURSE_REPO_URL (else the origin remote), COURSE_REPO_BRANCH,
# COURSE_JUPYTERHUB_URL and COURSE_BINDERHUB_URL: see tools/book_config.py.
book: setup
	$(RUN_ENV) $(PY) tools/book_config.py _build/_config.yml
	$(RUN_ENV) $(VENV)/bin/jupyter-book build . --path-output . --config _build/_config.yml
	@echo "Book rendered: open _build/html/index.html"

# Full-mode reference run for readers with a GPU: executes every chapter (MODE=full by default) into a
# staging folder, then publishes it as results/reference/<machine>-<mode>/ (which the book shows beside the
# reader's own) only if no record was measured while other processes took CPU time (check-quiet lists them
# and the run stops; the staging folder stays for inspection). Then the CPU deployment benchmark
# (tools/bench_cpu_deploy.py: ResNet-101 224 batch 16, every CPU runtime) adds its table as JSON,
# again only from a quiet run. Run it on a quiet machine.
bench: setup
	@slug=$$(COURSE_MODE=$(or $(MODE),full) $(PY) -m helpers.record.ledger slug --features 2>/dev/null | tail -1); \
	stage=$(CURDIR)/results/local/bench-staging/$$slug; rm -rf $$stage; \
	echo "Reference run into $$stage, published as results/reference/$$slug if quiet"; \
	COURSE_MODE=$(or $(MODE),full) COURSE_RESULTS_DIR=$$stage PYTHONHASHSEED=0 OMP_WAIT_POLICY=PASSIVE \
	  $(PY) -m pytest -q -rs notebooks --nbval-lax --nbval-cell-timeout=3600 -p no:cacheprovider && \
	$(PY) -m helpers.record.ledger check-quiet $$stage && \
	$(PY) tools/bench_cpu_deploy.py --fail-if-contended \
	  --json $$stage/benchmarks/cpu_deploy_resnet101_b16.json && \
	rm -rf results/reference/$$slug && mkdir -p results/reference && mv $$stage results/reference/$$slug
	@echo "Commit results/reference/ to publish these figures in the book."

# Full mode end to end on a CPU, before any GPU (tools/full_cpu_run.py says what it records), then
# the GPU estimate beside it (tools/gpu_estimate.py), book/setup.md's table, chapter_times.json and
# every chapter's Time line from them. A run on another CPU than the reference (the one
# chapter_times.json's quick run names) goes beside it: a column of book/setup.md's table, a figure
# in each Time line. Not part of make test. CHAPTERS="04 05" runs only those, in that order.
fullcpu: setup
	$(PY) tools/full_cpu_run.py $(if $(CHAPTERS),--only $(CHAPTERS))
	$(PY) tools/gpu_estimate.py --write-setup
	$(PY) tools/chapter_times.py record-full \
	  results/reference/$$(COURSE_MODE=full COURSE_FEWEST=1 $(PY) -m helpers.record.ledger slug --features | tail -1)-cpu
	$(PY) tools/chapter_times.py write
	$(PY) tools/machine_needs.py write

# make fullcpu trains at a tenth of full mode's steps: whether chapters 2 and 8's full-mode
# recipes learn in their full steps shows here, on 64 px images (tools/training_proxy.py; on a GPU,
# tests/gpu runs them at 224 px). Not part of make test.
trainproxy: setup
	$(PY) tools/training_proxy.py

# Chapter 10's whole ladder on your own classifier: MODEL is a torchvision classifier's name or
# package.module:function (your builder, called with num_classes=). The executed page goes to
# results/local/ladder/; the decision guide is printed. FEWEST=1 runs the fewest rounds.
ladder: setup
	@[ -n "$(MODEL)" ] || { echo "make ladder MODEL=<torchvision name or package.module:function>"; exit 2; }
	$(RUN_ENV) $(PY) tools/ladder.py "$(MODEL)" $(if $(filter 1,$(FEWEST)),--fewest)

# Register the environment as a Jupyter kernel ("Course (fast-inference)") for a JupyterLab that runs
# from another environment (a GPU rental's, a hub's): the course's settings live in the kernel spec's env.
# MODE=full|quick pins the mode (without it every chapter chooses from the machine it runs on: an
# instance restarted without its GPU falls back to quick); KERNEL_INSTALL=--sys-prefix or --prefix=DIR.
# NO_GPU=1 hides the GPUs from the kernel (CUDA_VISIBLE_DEVICES empty): a quick-mode hub on a GPU
# machine, where twenty kernels would otherwise each open a CUDA context on the shared card.
# The registration (its arguments, where the spec landed) is remembered for make restore and make doctor.
KERNEL_INSTALL ?= --user
kernel: setup
	@out=$$($(PY) -m ipykernel install $(KERNEL_INSTALL) --name course --display-name "Course (fast-inference)" \
	  $(if $(MODE),--env COURSE_MODE $(MODE)) $(if $(filter 1,$(NO_GPU)),--env CUDA_VISIBLE_DEVICES "") \
	  --env OMP_WAIT_POLICY PASSIVE --env PYTHONHASHSEED 0 2>&1); \
	rc=$$?; echo "$$out"; [ $$rc = 0 ] || exit $$rc; \
	bash tools/remember.sh $(LOCAL_MK) KERNEL_ARGS "$(strip $(if $(MODE),MODE=$(MODE)) $(if $(filter 1,$(NO_GPU)),NO_GPU=1) KERNEL_INSTALL=$(KERNEL_INSTALL))" && \
	bash tools/remember.sh $(LOCAL_MK) KERNEL_SPEC "$$(echo "$$out" | sed -n 's/^Installed kernelspec course in //p')"

# After a rental instance is re-created from its saved data disk, one command puts back what lived on the
# system disk: the system packages (nginx and libb64 for chapter 9; tools/install_system_deps.sh) and the
# kernel registration of `make kernel` (as it was made, from $(LOCAL_MK)); then the doctor checks the rest.
# The environment itself, the clone and your results are on the data disk and stay as they were.
restore:
	bash tools/install_system_deps.sh
	@if [ -n "$(KERNEL_ARGS)" ]; then $(MAKE) --no-print-directory kernel $(KERNEL_ARGS); \
	else echo "restore: no make kernel registration remembered in $(LOCAL_MK): no kernel to register"; fi
	@$(DOCTOR)

# Known vulnerabilities of the installed environment (of requirements.txt's pins when nothing is installed
# yet), by pip-audit from a venv of its own ($(AUDIT_VENV)), so that the course's stays as pinned. It needs
# pypi.org's per-release JSON API (AUDIT_SERVICE=osv: api.osv.dev); tools/audit.py says what could not be
# checked (exit 2) and which vulnerabilities the pins accept. Not part of check or test: CI must pass offline.
AUDIT_VENV ?= .cache/pip-audit-venv
AUDIT_SERVICE ?= pypi
PIP_AUDIT := pip-audit==2.10.1
audit:
	@[ -x $(AUDIT_VENV)/bin/pip-audit ] || { rm -rf $(AUDIT_VENV) && $(or $(PYTHON310),python3) -m venv $(AUDIT_VENV) \
	  && $(AUDIT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "$(PIP_AUDIT)"; } \
	  || { echo "audit: could not install $(PIP_AUDIT) into $(AUDIT_VENV) (no package index?)"; exit 2; }
	@$(AUDIT_VENV)/bin/python tools/audit.py --pip-audit $(AUDIT_VENV)/bin/pip-audit --service $(AUDIT_SERVICE) \
	  $(if $(wildcard $(STAMP)),--python $(PY),--requirements requirements.txt)

# Headless, also as root (rented GPU containers log you in as root; Jupyter refuses root without
# --allow-root). LAB_IP=0.0.0.0 listens on every interface (behind a provider's port forwarding);
# the default 127.0.0.1 is for an SSH tunnel: ssh -L 8888:localhost:8888 you@machine. The token is
# printed; LAB_TOKEN=... chooses it.
LAB_IP ?= 127.0.0.1
LAB_PORT ?= 8888
LAB_TOKEN ?=
lab: setup
	@token="$(LAB_TOKEN)"; [ -n "$$token" ] || token=$$($(PY) -c 'import secrets; print(secrets.token_hex(24))'); \
	root=$$([ "$$(id -u)" = 0 ] && echo --allow-root); \
	echo "JupyterLab on http://$(LAB_IP):$(LAB_PORT)/lab?token=$$token"; \
	echo "From your own browser: ssh -L $(LAB_PORT):localhost:$(LAB_PORT) you@this-machine, then open"; \
	echo "http://localhost:$(LAB_PORT)/lab?token=$$token (or the provider's forwarded address, with LAB_IP=0.0.0.0)"; \
	exec env $(RUN_ENV) $(VENV)/bin/jupyter lab --no-browser --ip=$(LAB_IP) --port=$(LAB_PORT) \
	  --port-retries=0 $$root --IdentityProvider.token=$$token --ServerApp.root_dir=notebooks

# Style and single-source checks (also run by .ci/run): ruff lint + format over the package, tests, tools and
# the notebooks' code cells (notebook lines <= 100 characters), and #@save cells equal to the package.
check: setup
	$(VENV)/bin/ruff check src tests tools notebooks conftest.py
	$(VENV)/bin/ruff format --check src tests tools notebooks conftest.py
	$(PY) tools/save_cells.py --check
	@if [ -f ../shared/tools/course_check.py ]; then python3 ../shared/tools/course_check.py .; fi

clean:
	rm -rf _build results/local notebooks/artifacts

# gives back the ~13 GB environment too (the next make target re-creates it)
distclean:
	@if [ -d "$(VENV)/conda-meta" ] || { [ ! -f "$(VENV)/.course-created" ] && [ "$(VENV)" != ".venv" ]; }; then \
	  echo "distclean: $(VENV) was not created by this Makefile (a conda or your own environment): not deleting it."; \
	  echo "           Remove it yourself if you mean to (conda: 'conda env remove -p $(VENV)')."; \
	  exit 1; fi
	$(MAKE) --no-print-directory clean
	rm -rf $(VENV) $(AUDIT_VENV)
