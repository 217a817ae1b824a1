#!/usr/bin/env bash
# Prepares .whl/ (git-ignored) with the wheels bench/bench_flashinfer.py needs on the GPU
# machine, which reaches no package registry: FlashInfer and the one dependency of its
# import that the GPU image lacks (apache-tvm-ffi, with a known typing-extensions).
# Everything else FlashInfer imports (torch, numpy, jinja2, requests, tqdm, packaging,
# nvidia-ml-py, cuda-bindings, ninja, einops, click, tabulate) is in the GPU image already
# (import flashinfer was checked with exactly those); the optional backends' packages
# (nvidia-cudnn-frontend, nvidia-cutlass-dsl, cuda-tile, nccl4py) are not needed by the
# FA2/FA3 decode and prefill paths the benchmark uses, and are left out.
# FlashMLA travels too (bench/bench_flashmla.py, chapter 11's anchor): sgl-flash-mla, 9.9 MB,
# a build whose extensions use PyTorch's stable ABI (made for torch 2.14; the GPU image's
# torch 2.11 has every symbol it needs) and keep the SM90 dense decode. Installed with
# --no-deps: its metadata asks for torch >= 2.14.1, which the stable ABI does not need.
#
# The FlashInfer wheel is ~62 MB, almost all of it CUDA sources for its JIT, and the device
# tool carries at most 64 MiB with the working tree. So the wheel is repacked, trimmed:
#   - every Python file stays (import flashinfer imports hundreds of modules eagerly);
#   - data/include (FlashInfer's headers) and data/spdlog/include stay whole;
#   - data/csrc keeps the batch/single decode and prefill sources and templates (FA2 and the
#     sm90 FA3 ones), and the batch MLA ones (chapter 11's baseline: BatchMLAPagedAttentionWrapper) and the #include closure of those and of data/include;
#   - data/cutlass and data/cccl keep only the headers in that #include closure (thrust
#     whole if any of it is reached: it includes through macros); their Python packages,
#     examples, tests and docs go;
#   - RECORD is rewritten for the files kept.
# MoE, Blackwell (sm100/sm120), trtllm-gen, fp4/mxfp, comm/allreduce and GEMM sources go.
#
#   usage: bash tools/fetch_flashinfer.sh      (then .whl/ holds four wheels, ~33 MB)
# On the GPU machine (carry .whl):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FLASHINFER_VERSION=0.7.2.post1
TVM_FFI_VERSION=0.1.15.post2  # flashinfer 0.7.2.post1 asks for apache-tvm-ffi <0.2, >=0.1.11
# apache-tvm-ffi asks for typing-extensions >= 4.13; the GPU image's version is not on record,
# so a known one travels too (pure Python, 45 kB; it shadows the image's only under PYTHONPATH).
TYPING_EXTENSIONS_VERSION=4.15.0
FLASHMLA_VERSION=1.0.0  # sgl-flash-mla: one abi3 wheel for every CPython >= 3.10
PY=${PYTHON:-python3}

dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp "${platforms[@]}" -d "$dl" \
    "flashinfer-python==$FLASHINFER_VERSION" "apache-tvm-ffi==$TVM_FFI_VERSION" \
    "typing-extensions==$TYPING_EXTENSIONS_VERSION" "sgl-flash-mla==$FLASHMLA_VERSION"

mkdir -p .whl
rm -f .whl/flashinfer_python-*.whl .whl/apache_tvm_ffi-*.whl .whl/typing_extensions-*.whl .whl/sgl_flash_mla-*.whl
cp "$dl"/apache_tvm_ffi-*.whl "$dl"/typing_extensions-*.whl "$dl"/sgl_flash_mla-*.whl .whl/
src=$(ls "$dl"/flashinfer_python-*.whl)

"$PY" - "$src" ".whl/$(basename "$src")" <<'PYEOF'
"""Repacks the FlashInfer wheel with only what its decode/prefill JIT needs (see above)."""
import base64
import hashlib
import re
import sys
import zipfile

src, dst = sys.argv[1], sys.argv[2]
zin = zipfile.ZipFile(src)
names = [i.filename for i in zin.infolist() if not i.is_dir()]
present = set(names)
D = "flashinfer/data/"

# Where the JIT's compiler looks for headers (flashinfer/jit/env.py, cpp_ext.py), plus the
# including file's own folder, which is searched first for "quoted" includes.
SEARCH = [
    D + "include",
    D + "csrc",
    D + "cutlass/include",
    D + "cutlass/tools/util/include",
    D + "spdlog/include",
    D + "cccl/cub",
    D + "cccl/libcudacxx/include",
    D + "cccl/thrust",
]
INCLUDE = re.compile(rb'^\s*#\s*include\s*(?:[<"]([^>"]+)[>"]|CUDA_STD_HEADER\((\w+)\))', re.M)

# Entry points: the sources and templates the batch/single decode and prefill generators
# (flashinfer/jit/attention/modules.py) name, and every small header at csrc's top level.
ENTRY = re.compile(
    r"(batch_decode|batch_prefill|single_decode|single_prefill|batch_mla)[^/]*\.(cu|cuh|jinja|inc|h)$"
)
SOURCE = (".h", ".hpp", ".cuh", ".cu", ".inl", ".inc", ".jinja", ".cc", ".cpp", ".ipp")
# The attention variants the generated sources include (modules.py's variant_decl).
EXTRA_ROOTS = [D + "include/flashinfer/attention/variants.cuh",
               D + "include/flashinfer/attention/hopper/variants.cuh"]
DROP_DATA_UNDER = ("flashinfer/experimental/", "flashinfer/moe_ep/", "flashinfer/fused_moe/")
keep = set()
todo = list(EXTRA_ROOTS)
followed = set()
for n in names:
    if not n.startswith(D):
        # Python and dist-info stay; the CUDA sources and tuning tables that the MoE and
        # experimental packages carry beside their Python (read only when those run) go.
        if n.endswith(".py") or not n.startswith(DROP_DATA_UNDER):
            keep.add(n)
        continue
    rel = n[len(D):]
    top = rel.split("/")[0]
    if top == "include" or rel.startswith("spdlog/include/"):
        keep.add(n)  # kept whole; only what the entry points reach is followed
    elif top == "csrc" and rel.count("/") == 1 and (
        ENTRY.search(rel) or rel.endswith((".h", ".cuh", ".inc"))
    ):
        todo.append(n)
    elif rel.count("/") == 0:  # data/*.py and the like
        keep.add(n)
    elif re.search(r"(^|/)(LICENSE|LICENSE\.txt|NOTICE)$", rel) and rel.count("/") == 1:
        keep.add(n)  # the bundled projects' licences

thrust_reached = False
while todo:
    n = todo.pop()
    if n in followed:
        continue
    followed.add(n)
    keep.add(n)
    if not n.endswith(SOURCE) and "/include/" not in n:
        continue
    text = zin.read(n)
    here = n.rsplit("/", 1)[0]
    for m in INCLUDE.finditer(text):
        if m.group(1):
            cands = [m.group(1).decode()]
        else:  # cute's CUDA_STD_HEADER(x): <cuda/std/x>, or <x> on the host
            cands = ["cuda/std/" + m.group(2).decode(), m.group(2).decode()]
        for inc in cands:
            for base in [here] + SEARCH:
                p = base + "/" + inc
                parts = []
                for seg in p.split("/"):  # normalise ../ and ./
                    if seg == "..":
                        if parts:
                            parts.pop()
                    elif seg not in ("", "."):
                        parts.append(seg)
                p = "/".join(parts)
                if p in present:
                    todo.append(p)
                    if p.startswith(D + "cccl/thrust/"):
                        thrust_reached = True
                    break
if thrust_reached:  # thrust picks headers through macros: keep its headers whole
    keep |= {n for n in names if n.startswith(D + "cccl/thrust/thrust/")}

dist = [n for n in names if n.endswith(".dist-info/RECORD")][0]
keep.discard(dist)
record = []
with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
    for info in zin.infolist():
        if info.is_dir() or info.filename not in keep:
            continue
        data = zin.read(info.filename)
        zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (info.filename, digest, len(data)))
    record.append(dist + ",,")
    zout.writestr(dist, "\n".join(record) + "\n")

def size(prefix, z):
    return sum(i.compress_size for i in z.infolist() if i.filename.startswith(prefix))

zk = zipfile.ZipFile(dst)
print("trimmed %s: %d of %d files kept" % (dst, len(zk.infolist()), len(names)))
for part in ["csrc", "include", "cutlass", "cccl", "spdlog"]:
    was, now = size(D + part, zin) / 1e6, size(D + part, zk) / 1e6
    print("  data/%-8s %6.2f MB (was %6.2f MB)" % (part, now, was))
PYEOF

# The trimmed wheel must still install as the GPU machine will install it.
site=$(mktemp -d)
"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --target "$site" .whl/*.whl
test -f "$site/flashinfer/decode.py" && test -f "$site/flashinfer/data/csrc/batch_decode.cu" \
    && test -d "$site/tvm_ffi" && test -f "$site/flash_mla/_C_legacy.abi3.so"
rm -rf "$site"
ls -l .whl
du -ch .whl/*.whl | tail -1
