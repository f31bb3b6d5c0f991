#!/bin/sh
# Builds the probe libcuda.so.1 into $1 (default build/driver_probe): research tool, not part of the package.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../build/driver_probe}
inc=${CUDA_INCLUDE:-/usr/local/cuda-13.0/include}
mkdir -p "$out"
python3 "$here/gen_probe.py" "$inc" "$out"
drv=$here/../../csrc/driver    # the integrity answer is libvcuda's own (integrity.c)
gcc -shared -fPIC -O1 -g -Wall -Wno-unused-function -I"$inc" -I"$here" -I"$drv" -Wl,-soname,libcuda.so.1 \
    -o "$out/libcuda.so.1" "$here/probe.c" "$here/tables.c" "$drv/integrity.c" "$out/probe_gen.c" -ldl -lpthread
echo "built $out/libcuda.so.1"
