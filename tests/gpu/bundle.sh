#!/usr/bin/env bash
# tests/gpu/bundle.sh — what tests/gpu/run.sh needs on a GPU machine that cannot build
# ftc (no flex, bison, jansson or OpenBLAS there, and no network to get them): ftc and
# test_kernels from this machine's build/ (bash setup.sh makes it), stripped, with the
# shared libraries they load that are not the C library's own, in gpu-bundle/:
#   gpu-bundle/bin/ftc  gpu-bundle/bin/test_kernels  gpu-bundle/lib/*.so*
# run.sh uses it when it is there (LD_LIBRARY_PATH=gpu-bundle/lib). The CUDA libraries
# are not in it: ftc loads the driver, NVRTC and cuBLASLt of the machine it runs on.
# usage: bash tests/gpu/bundle.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
for b in "$build/ftc" "$build/tests/test_kernels"; do
    [ -x "$b" ] || { echo "bundle.sh: no $b; run bash setup.sh first" >&2; exit 1; }
done
rm -rf gpu-bundle.tmp
mkdir -p gpu-bundle.tmp/bin gpu-bundle.tmp/lib
for b in "$build/ftc" "$build/tests/test_kernels"; do
    strip -o "gpu-bundle.tmp/bin/$(basename "$b")" "$b"
    # Every resolved library but the C library's (libc, libm, the loader, libpthread,
    # libdl, librt) and gcc's libgcc_s, which a machine with gcc has.
    ldd "$b" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
        case $(basename "$lib") in
            libc.so*|libm.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*) ;;
            *) cp -L "$lib" gpu-bundle.tmp/lib/ ;;
        esac
    done
done
# The newest C library symbol version the binaries need, for the record.
need=$(objdump -T gpu-bundle.tmp/bin/* gpu-bundle.tmp/lib/* 2>/dev/null |
       grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "$need" > gpu-bundle.tmp/glibc
rm -rf gpu-bundle
mv gpu-bundle.tmp gpu-bundle
echo "gpu-bundle: $(du -sh gpu-bundle | cut -f1) ($(ls gpu-bundle/lib | tr '\n' ' ')); needs $need or newer"
