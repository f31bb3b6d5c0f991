#!/bin/sh
# Reproduces docs/driver.md's experiments: builds the probe libcuda.so.1 and the programs, runs each, and leaves
# one log per run in $OUT (default build/driver_probe/logs). Needs nvcc 13.0; no GPU and no libcuda.so.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
lib=${PROBE_LIB:-$root/build/driver_probe}
out=${OUT:-$lib/logs}
bin=$lib/bin
cuda=${CUDA_HOME:-/usr/local/cuda-13.0}
nvcc=${NVCC:-nvcc}
sh "$here/build.sh" "$lib"
ln -sf libcuda.so.1 "$lib/libcuda.so"          # link name for -lcuda
mkdir -p "$out" "$bin"
"$nvcc" -o "$bin/vector_add_static" "$root/examples/hello/vector_add.cu"
"$nvcc" -cudart shared -o "$bin/vector_add_shared" "$root/examples/hello/vector_add.cu"
"$nvcc" --default-stream per-thread -o "$bin/vector_add_ptds" "$root/examples/hello/vector_add.cu"
for p in rt_calls reset entry_point errmap features; do "$nvcc" -o "$bin/$p" "$here/$p.cu"; done
"$nvcc" -ptx -o "$bin/drv_kernel.ptx" "$here/drv_kernel.cu"
"$nvcc" -fatbin -o "$bin/drv_kernel.fatbin" "$here/drv_kernel.cu"
gcc -I"$cuda/include" -o "$bin/drv_api" "$here/drv_api.c" -L"$lib" -lcuda

run() {  # run NAME ENV... -- CMD...: the probe's log and the program's output in $out/NAME.log
    name=$1; shift
    env PROBE_LOG="$out/$name.log" LD_LIBRARY_PATH="$lib:$cuda/lib64" "$@" >"$out/$name.out" 2>&1 || true
}
rm -f "$out"/*.log
run static "$bin/vector_add_static" 1024
run static_lazy PROBE_LAZY=1 "$bin/vector_add_static" 1024
run shared "$bin/vector_add_shared" 1024
run ptds "$bin/vector_add_ptds" 1024
run rt_calls PROBE_LOG= PROBE_DEFAULT=0 "$bin/rt_calls"   # probe lines and "==== call" lines interleaved
run features PROBE_LOG= PROBE_DEFAULT=0 "$bin/features"   # the runtime features, likewise (UNIMPL lines: their calls)
run reset "$bin/reset"
run entry_point "$bin/entry_point"
run drv_api_ptx "$bin/drv_api" "$bin/drv_kernel.ptx"
run drv_api_fatbin "$bin/drv_api" "$bin/drv_kernel.fatbin"
for t in f8cff95121468b4eb9e2fb469e7c0dd9 42d85a8123f6cb478298f6e78a3aecdc 263e88607cd2614392f6bbd5006dfa7e \
         c693336e1121df11a8c368f355d89593 a094798c2e742e7493f20800200c0a66 6bd5fb6c5bf4e74a8987d93912fd9df9 \
         d4082055bde6704b8d34ba123c66e1f2; do
    run "refuse_$t" PROBE_NO_TABLE=$t "$bin/vector_add_static" 16
done
# CUresult -> cudaError_t as the runtime maps it: cuMemGetInfo returns each code, cudaMemGetInfo reports
grep -oE '^ *CUDA_(SUCCESS|ERROR_[A-Z0-9_]+) *= *[0-9]+' "$cuda/include/cuda.h" | tr -d ' ' |
    while IFS='=' read -r name val; do
        printf '%s %s %s\n' "$val" "$name" \
            "$(PROBE_MEMINFO_RC=$val PROBE_LOG=/dev/null LD_LIBRARY_PATH="$lib" "$bin/errmap")"
    done >"$out/errmap.txt"
# the entry points the static runtime asks for: name version flags -> symbol
grep 'cuGetProcAddress_v2(' "$out/static.log" |
    sed -E 's/.*\("([^"]*)", ver=([0-9]+), flags=([0-9]+)\) -> ([^ ]+).*/\1 \2 \3 \4/' >"$out/requested.txt"
echo "logs in $out"
