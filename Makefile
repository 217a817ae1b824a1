# The course's front door. Every verb prints a short summary; `make help` lists them.
#
#   make demo               the serving engine (chapter 8) on the built-in trace
#   make tour               the tour: each finished chapter on a built-in workload
#   make test-chapter-1     your code for chapter 1 (red until you finish the TODOs)
#   make test-solution-1    the reference solution's tests for chapter 1
#   make test-mine-8        chapter 8's tests on your chapters 1-8 together (demo-mine: the demo)
#   make check-chapter-1    the same tests in checked mode: races, out-of-bounds accesses,
#                           uninitialised shared reads and shuffle call sites, with their lines
#   make hint-1             the next hint for chapter 1 (EXERCISE=2|all, LEVEL=2, RESET=1)
#   make watch-1            re-run chapter 1's tests whenever chapters/01-*/ changes
#   make progress           one line: which chapters pass, from the last test runs
#   make test               the checks a student runs: solutions pass, skeletons fail, emulator
#   make ci                 what CI runs: make test, then checked mode, mutant suites, the book,
#                           directed at what changed and capped by CI's budget
#   make ci-full            all of make ci's checks for every chapter, uncapped
#   make book | doctor | nvcc-check | skeletons
#
# BACKEND=cpu|cuda forces a backend (default: cuda if a GPU works, else the CPU emulator).
# PYTHON=... uses another Python with numpy + ml_dtypes; SKIP_SETUP=1 skips tools/setup.sh.

SHELL := /bin/bash
export PATH := $(PATH):/usr/local/cuda/bin

BACKEND ?= $(shell bash tools/detect_backend.sh)
BUILD := build/$(BACKEND)
PYTHON ?= $(CURDIR)/.venv/bin/python
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CHAPTERS := $(sort $(patsubst solutions/%/,%,$(wildcard solutions/[0-9][0-9]-*/)))

.PHONY: help setup configure check-configure build demo demo-mine tour test test-chapter-% test-solution-% test-mine-% \
        check-chapter-% check-solution-% book doctor nvcc-check skeletons check-skeletons clean \
        hint-% watch-% progress ci ci-full

help:
	@sed -n '2,21p' Makefile | sed 's/^# \{0,1\}//'

setup:
ifneq ($(SKIP_SETUP),1)
	@bash tools/setup.sh --quiet
endif

configure: setup
	@mkdir -p build
	@cmake -S . -B $(BUILD) $(GENERATOR) -DPA_BACKEND=$(BACKEND) -DPA_PYTHON=$(PYTHON) \
	  -DCMAKE_BUILD_TYPE=Release > $(BUILD).configure.log 2>&1 || \
	  { mkdir -p build; cat $(BUILD).configure.log; echo "cmake failed (log: $(BUILD).configure.log); try: make doctor"; exit 1; }

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The serving engine, dense policy against paged, with a progress display (a smaller
# default on the CPU emulator). `make tour` walks the chapters one by one.
demo: configure
	@cmake --build $(BUILD) -j $(JOBS) --target serve tour > $(BUILD).build.log 2>&1 || \
	  { cat $(BUILD).build.log; exit 1; }
	@$(BUILD)/demo/serve
	@echo "(chapter by chapter: make tour)"

tour: configure
	@cmake --build $(BUILD) -j $(JOBS) --target tour > $(BUILD).build.log 2>&1 || \
	  { cat $(BUILD).build.log; exit 1; }
	@$(BUILD)/demo/tour

# make test-chapter-1: the student's code, built from chapters/01-*.
test-chapter-%: configure
	@bash tools/run_chapter.sh $(BUILD) chapter $*

# Hints, one tier at a time (tools/hint.py); nothing is built.
hint-%:
	@python3 tools/hint.py $* $(if $(EXERCISE),--exercise $(EXERCISE)) \
	  $(if $(LEVEL),--level $(LEVEL)) $(if $(filter 1 yes,$(RESET)),--reset) \
	  $(if $(filter 1 yes,$(LIST)),--list)

watch-%: configure
	@bash tools/watch_chapter.sh $(BUILD) $*

progress:
	@python3 tools/progress.py $(BUILD) $(CHECK_BUILD) build/cpu build/cuda

test-solution-%: configure
	@bash tools/run_chapter.sh $(BUILD) solution $*

# make test-mine-8: chapter 8's tests with every chapter from chapters/ (your chapters 1-8
# together, not the reference's earlier chapters); make demo-mine: the demo on your code.
test-mine-%: configure
	@bash tools/run_chapter.sh $(BUILD) mine $*

demo-mine: configure
	@cmake --build $(BUILD) -j $(JOBS) --target serve_mine > $(BUILD).build.log 2>&1 || \
	  { grep -E "error" $(BUILD).build.log | head -n 30; echo "build failed (log: $(BUILD).build.log)"; exit 1; }
	@$(BUILD)/demo/serve_mine

# Checked mode: the emulator as a CPU compute-sanitizer (ThreadSanitizer underneath).
# Its own build, so that switching back and forth rebuilds nothing.
CHECK_BUILD := build/cpu-check
check-configure: setup
	@mkdir -p build
	@cmake -S . -B $(CHECK_BUILD) $(GENERATOR) -DPA_BACKEND=cpu -DPA_EMU_CHECK=ON \
	  -DPA_PYTHON=$(PYTHON) -DCMAKE_BUILD_TYPE=Release > $(CHECK_BUILD).configure.log 2>&1 || \
	  { cat $(CHECK_BUILD).configure.log; echo "cmake failed (log: $(CHECK_BUILD).configure.log)"; exit 1; }

check-chapter-%: check-configure
	@PA_CHECKED=1 bash tools/run_chapter.sh $(CHECK_BUILD) chapter $*

check-solution-%: check-configure
	@PA_CHECKED=1 bash tools/run_chapter.sh $(CHECK_BUILD) solution $*

test: configure
	@bash tools/run_tests.sh $(BUILD) $(BACKEND) $(PYTHON)

# make ci: make test's checks, then the slower ones CI runs (.ci/run): more emulator
# schedules, checked mode, the planted-bug and exercise-mutant suites (kill rate per
# chapter), chapter 8's long random-trace test, the book and its browser check, nvcc-check;
# directed at the chapters this commit changed plus a rotating share, each phase capped at
# its share of CI's budget (what is cut is printed). make ci-full: all of it, uncapped.
ci: configure
	@bash tools/run_tests.sh $(BUILD) $(BACKEND) $(PYTHON) ci

ci-full: configure
	@bash tools/run_tests.sh $(BUILD) $(BACKEND) $(PYTHON) full

book: configure
	@bash tools/build_book.sh $(BUILD) $(PYTHON)
	@echo "The book is in book/book/index.html"

doctor:
	@bash tools/doctor.sh

nvcc-check:
	@bash tools/nvcc_check.sh

skeletons:
	@python3 tools/make_skeletons.py

check-skeletons:
	@python3 tools/make_skeletons.py --check

clean:
	rm -rf build book/book
