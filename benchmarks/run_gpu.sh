#!/usr/bin/env bash
# The one script for a GPU machine: GPU tests, compute-sanitizer on a small fused LSTM, and the benchmarks.
#
# Run from anywhere; it works in the repository root. Every stage is logged under a header, keeps going
# when a stage fails, and the run ends with a summary of stage exit codes. Output goes to ${OUT:-/tmp/out}:
#   run_gpu.log       headers, nvidia-smi, versions, the tail of every stage log, the summary
#   gpu_tests.log     python3 -m pytest -q -m gpu tests -rs
#   sanitize.log      compute-sanitizer memcheck and racecheck: sanitize_case.py (4 cases), sanitize_scan.py
#   bench_fused.log   benchmarks/bench_fused.py, shapes section (bench_sweeps.log: batch and length sweeps)
#   host_overhead.log benchmarks/host_overhead.py (host time per call, cProfile)
#   bench_products.log benchmarks/bench_step_products.py (one step's tensor-core products: mma.sync vs wgmma)
#   bench_cells.log   benchmarks/bench_cells.py (GRU, sLSTM, Elman on the fused kernel vs cuDNN and flashrnn)
#   bench_alternating.log  benchmarks/bench_alternating.py (one head of 2048 / 4096 vs cuDNN)
#   bench_scan.log    benchmarks/bench_scan.py, when it exists
#   results.tar.gz    every results file (CSV, markdown, PNG); unpack into benchmarks/results/
#
# Environment:
#   STAGES           which stages, in order (default "info tests sanitize host products fused sweeps cells
#                    alternating scan")
#   FUSED_ARGS       extra arguments for bench_fused.py (e.g. "--quick", "--flashrnn-shapes none")
#   SCAN_ARGS        extra arguments for bench_scan.py
#   CELLS_ARGS       extra arguments for bench_cells.py (e.g. "--dtypes bf16 --flashrnn-shapes none")
#   SANITIZE_TOOLS   compute-sanitizer tools (default "memcheck racecheck"; synccheck, initcheck also exist)
#   *_TIMEOUT        seconds per stage: TESTS_TIMEOUT, SANITIZE_TIMEOUT (each tool), FUSED_TIMEOUT,
#                    SWEEPS_TIMEOUT, CELLS_TIMEOUT, ALTERNATING_TIMEOUT, HOST_TIMEOUT, SCAN_TIMEOUT;
#                    bench_fused stops starting jobs 90 s before its limit, bench_cells 60 s before
#   PYTHON           interpreter (default python3)
# The default stages take well over ten minutes; for shorter runs split them, e.g. STAGES="info tests
# sanitize", then STAGES="fused", then STAGES="sweeps scan" (each run packs all results present).
#   TEST_WORKERS     pytest-xdist workers for the GPU tests where xdist is importable (default 8)
# Wheels in .whl/ (flashrnn 1.0.8, accelerated-scan 0.3.1; highspy for constrint's linear relaxations, which the GPU
# machine lacks; pytest-xdist and execnet to run the GPU tests in
# parallel) are installed into /tmp/site, offline. The folder is not in git; on a machine with PyPI:
#   pip download --no-deps -d .whl accelerated-scan==0.3.1 flashrnn==1.0.8 pytest-xdist==3.8.0 execnet==2.1.2
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl highspy==1.16.0
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/run_gpu.log"

PYTHON=${PYTHON:-python3}
STAGES=${STAGES:-"info tests sanitize host products fused sweeps cells alternating scan"}
export BENCH_RESULTS_DIR=${BENCH_RESULTS_DIR:-/tmp/bench_results}
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export PYTHONFAULTHANDLER=1
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_extensions}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
mkdir -p "$BENCH_RESULTS_DIR" "$TORCH_EXTENSIONS_DIR"
SUMMARY=()

header() {
    echo
    echo "======================================================================"
    echo "== $* ($(date -u '+%Y-%m-%d %H:%M:%S') UTC)"
    echo "======================================================================"
}

# run_stage NAME LOGFILE SECONDS COMMAND...: run COMMAND under a time limit, appending its output to
# LOGFILE, show the log's tail here and record the exit code.
run_stage() {
    local name=$1 log=$2 limit=$3
    shift 3
    header "stage $name: $* (limit ${limit} s)"
    local begin=$SECONDS rc
    echo "== stage $name: $* ($(date -u '+%H:%M:%S') UTC)" >>"$log"
    timeout --kill-after=15 "$limit" "$@" >>"$log" 2>&1
    rc=$?
    echo "-- last lines of $(basename "$log"):"
    tail -n "${TAIL_LINES:-60}" "$log"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "!! stage $name hit its ${limit} s limit"
    fi
    echo "== stage $name exit code $rc after $((SECONDS - begin)) s"
    SUMMARY+=("$name=$rc ($((SECONDS - begin)) s)")
}

pack_results() {
    tar -czf "$OUT/results.tar.gz" -C "$BENCH_RESULTS_DIR" . && echo "results packed: $OUT/results.tar.gz" \
        && tar -tzf "$OUT/results.tar.gz" | sed 's/^/   /'
}

main() {
    header "setup: wheels from .whl into /tmp/site"
    shopt -s nullglob
    WHEELS=(.whl/*.whl)
    shopt -u nullglob
    if [ "${#WHEELS[@]}" -gt 0 ]; then
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            "${WHEELS[@]}"
        rc=$?
        echo "installed ${WHEELS[*]}: exit code $rc"
        SUMMARY+=("wheels=$rc")
    else
        echo "no wheels in .whl/: the flashrnn anchor and accelerated-scan will be reported as unavailable"
        SUMMARY+=("wheels=none")
    fi
    ARCH=$("$PYTHON" -c 'import torch; print("%d.%d" % torch.cuda.get_device_capability())' 2>/dev/null) \
        && export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$ARCH}
    echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-unset} PYTHONPATH=$PYTHONPATH"

    SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -n 1)

    for stage in $STAGES; do
        case "$stage" in
        info)
            header "info"
            nvidia-smi || echo "nvidia-smi failed: $?"
            "$PYTHON" - <<'EOF' || echo "version query failed: $?"
import importlib, torch
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuda available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(), "capability", torch.cuda.get_device_capability())
for name in ("cupy", "flashrnn", "accelerated_scan", "flashrnn_kernels", "constrint", "hwmodels", "matplotlib"):
    try:
        module = importlib.import_module(name)
        print(f"{name}: {getattr(module, '__version__', '?')} at {getattr(module, '__file__', '?')}")
    except Exception as exc:
        print(f"{name}: import failed: {type(exc).__name__}: {exc}")
EOF
            nvcc --version | tail -n 2 || echo "nvcc not found"
            echo "compute-sanitizer: ${SANITIZER:-not found}"
            SUMMARY+=("info=done")
            ;;
        tests)
            # a fresh machine compiles every plan on first use: with pytest-xdist, workers compile side by side
            WORKERS=()
            if "$PYTHON" -c "import xdist" 2>/dev/null; then
                WORKERS=(-n "${TEST_WORKERS:-8}")
            fi
            run_stage tests "$OUT/gpu_tests.log" "${TESTS_TIMEOUT:-420}" \
                "$PYTHON" -m pytest -q -m gpu tests -rs -p no:cacheprovider ${WORKERS[@]+"${WORKERS[@]}"}
            ;;
        sanitize)
            if [ -z "$SANITIZER" ]; then
                header "stage sanitize: compute-sanitizer not found"
                SUMMARY+=("sanitize=missing")
                continue
            fi
            # Six cases: the fused LSTM with one block per head (the default), one head of 256 split over a
            # 16-block cluster (the distributed shared-memory exchange), one head of 768 split over 48 blocks (the
            # exchange through global memory; its backward sums partial products), two heads of 64 split with
            # partial sums, the scan kernels over many chunks (the look-back between blocks), and those captured
            # into CUDA graphs (the device's epoch).
            for case in "sanitize_case.py" "sanitize_case.py --heads 1 --head-dim 256" \
                "sanitize_case.py --heads 1 --head-dim 768" "sanitize_case.py --head-dim 64 --exchange partials" \
                "sanitize_scan.py" "sanitize_scan.py --graphs"; do
                label=$(case "$case" in *256*) echo _cluster ;; *768*) echo _global ;; *graphs*) echo _scan_graphs ;;
                    *scan*) echo _scan ;; *partials*) echo _partials ;;
                    *) echo "" ;; esac)
                # No caching allocator, so out-of-bounds accesses are not hidden inside torch's pooled blocks;
                # graph capture needs it.
                caching=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1)
                case "$case" in *graphs*) caching=(env -u PYTORCH_NO_CUDA_MEMORY_CACHING) ;; esac
                for tool in ${SANITIZE_TOOLS:-memcheck racecheck}; do
                    # Host API errors are not reported: cuda.bindings probes driver entry points that CUDA 13 lacks
                    # (cuGetProcAddress returns CUDA_ERROR_INVALID_VALUE), which is not a kernel error.
                    # shellcheck disable=SC2086
                    run_stage "sanitize_$tool$label" "$OUT/sanitize.log" "${SANITIZE_TIMEOUT:-240}" \
                        "${caching[@]}" "$SANITIZER" --tool "$tool" --error-exitcode 9 \
                        --report-api-errors no \
                        "$PYTHON" benchmarks/$case
                done
            done
            ;;
        fused)
            limit=${FUSED_TIMEOUT:-540}
            # shellcheck disable=SC2086
            run_stage fused "$OUT/bench_fused.log" "$limit" \
                "$PYTHON" benchmarks/bench_fused.py --sections shapes --budget-s $((limit - 90)) ${FUSED_ARGS:-}
            pack_results
            ;;
        sweeps)
            limit=${SWEEPS_TIMEOUT:-540}
            # shellcheck disable=SC2086
            run_stage sweeps "$OUT/bench_sweeps.log" "$limit" \
                "$PYTHON" benchmarks/bench_fused.py --sections batch,length --budget-s $((limit - 90)) ${FUSED_ARGS:-}
            pack_results
            ;;
        cells)
            limit=${CELLS_TIMEOUT:-420}
            # shellcheck disable=SC2086
            run_stage cells "$OUT/bench_cells.log" "$limit" \
                "$PYTHON" benchmarks/bench_cells.py --budget-s $((limit - 60)) ${CELLS_ARGS:-}
            pack_results
            ;;
        alternating)
            run_stage alternating "$OUT/bench_alternating.log" "${ALTERNATING_TIMEOUT:-300}" \
                "$PYTHON" benchmarks/bench_alternating.py
            pack_results
            ;;
        host)
            run_stage host "$OUT/host_overhead.log" "${HOST_TIMEOUT:-180}" "$PYTHON" benchmarks/host_overhead.py
            ;;
        products)
            run_stage products "$OUT/bench_products.log" 120 "$PYTHON" benchmarks/bench_step_products.py
            pack_results
            ;;
        scan)
            if [ -f benchmarks/bench_scan.py ]; then
                # shellcheck disable=SC2086
                run_stage scan "$OUT/bench_scan.log" "${SCAN_TIMEOUT:-420}" \
                    "$PYTHON" benchmarks/bench_scan.py ${SCAN_ARGS:-}
                pack_results
            else
                header "stage scan: benchmarks/bench_scan.py does not exist"
                SUMMARY+=("scan=absent")
            fi
            ;;
        *)
            header "unknown stage '$stage' (known: info tests sanitize host products fused sweeps cells alternating scan)"
            SUMMARY+=("$stage=unknown")
            ;;
        esac
    done

    header "summary"
    for entry in "${SUMMARY[@]}"; do
        echo "  $entry"
    done
    ls -la "$OUT"
}

main 2>&1 | tee -a "$LOG"
