#!/usr/bin/env bash
# The checks a CUDA machine runs (docs/benchmarks.md, "On a GPU"): the tests that touch the device, the
# projected training times, the training step eager against torch.compile and CUDA graphs, and
# ensembles against the same runs one by one, and the paper profile's looped cells trained to the end.
#   bash benchmarks/gpu_checks.sh [OUT_DIR] [PARTS]    PARTS: any of slice,graphs,tests,estimate,compile,ensemble,processes,looped
# A GPU window runs them in this order: slice,graphs,processes,estimate,tests.
# `slice` is `make paper-slice`: the paper profile's modular and looped runs, judged into
# docs/runsets/paper-slice.json (copied to OUT_DIR; commit it where it came back); SLICE_ARGS adds
# options (`--task looped`: the slice of looped alone, projected to fit a 15-minute window, while
# modular's studies take about half an hour; `--jobs 8`); GRAPHS_ARGS narrows `graphs` (`--task looped`).
# `graphs` times every run shape of the paper profile eager and under `graphs: auto`, and prints
# eager / auto per shape (benchmarks/graphs_ratio.py; exit 1 where auto is slower).
# `processes` times the paper profile's small runs as K (PROCESSES, default 2 4 8) processes
# sharing the one GPU against the same runs one after another (what several stages per GPU save).
# `looped` trains, scores and reports the paper profile's looped grid (each model's seeds as one
# ensemble) without DVC, in looped-paper/, and packs its records into OUT_DIR/looped-paper.tar.gz;
# LOOPED_SET adds overrides to the composed params (a short run to try the script:
# LOOPED_SET='-S looped.train.steps=20').
# Logs and JSON land in OUT_DIR (default gpu-out); estimate-paper.json, committed as
# docs/runsets/estimate-paper.json, gives the results page the GPU time of each paper-only claim.
# Run it from the repository root with the project installed editable: on a machine without a
# registry, `make setup-offline WHEELHOUSE=wheelhouse PYTHON=python3` from a `make wheelhouse`
# carried along (docs/cluster.md), then PATH=$PWD/.venv/bin:$PATH (stages/ is the package
# arithrepro.stages only through the editable install; a non-editable one is shadowed there by
# the source tree, which lacks it). The tests run on
# eight workers: the static step's tests alone take minutes on a GPU (docs/benchmarks.md).
set -uo pipefail
out=${1:-gpu-out}
parts=${2:-tests,estimate,compile,ensemble}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -c "import arithrepro.stages" 2>/dev/null \
    || { echo "gpu_checks: arithrepro.stages does not import: make setup-offline (or pip install -e .) first, .venv/bin on PATH" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" | tee -a "$out/gpu.txt"
if [[ $parts == *slice* ]]; then
    start=$SECONDS
    python3 -m arithrepro.cli paper-slice --yes ${SLICE_ARGS:-} 2>&1 | tee "$out/slice.log"
    echo "slice: $((SECONDS - start)) s" | tee -a "$out/slice.log"
    cp docs/runsets/paper-slice.json "$out/" 2>/dev/null
fi
if [[ $parts == *graphs* ]]; then
    for form in false auto; do
        python3 -m arithrepro.cli estimate --profile paper -S graphs=$form --steps 5 --warmup 3 ${GRAPHS_ARGS:-} \
            --no-ensemble --json "$out/estimate-graphs-$form.json" 2>&1 | grep -v "^estimate: timing" \
            > "$out/estimate-graphs-$form.log"
    done
    python3 -m benchmarks.graphs_ratio "$out/estimate-graphs-false.json" "$out/estimate-graphs-auto.json" \
        2>&1 | tee "$out/graphs.log"
fi
if [[ $parts == *tests* ]]; then
    python3 -m pytest -v -p no:cacheprovider -n ${TEST_WORKERS:-8} --dist ${TEST_DIST:-loadfile} --durations=20 tests/test_cuda.py tests/test_device.py \
        tests/test_fast_paths.py tests/test_micro_batches.py tests/test_optim.py \
        tests/test_decoding.py tests/test_recurrent_fused.py tests/test_retran_fused.py \
        tests/test_graphs.py tests/test_ensemble.py tests/test_ddp.py tests/test_provenance.py::test_a_cuda_run_names_its_gpu \
        2>&1 | tee "$out/tests.log"
fi
if [[ $parts == *estimate* ]]; then
    python3 -m arithrepro.cli estimate --profile paper --steps 5 --warmup 3 \
        --json "$out/estimate-paper.json" 2>&1 | grep -v "^estimate: timing" | tee "$out/estimate.log"
    python3 -m arithrepro.cli estimate --profile cpu --task expr --steps 10 --warmup 3 2>&1 \
        | grep -v "^estimate: timing" | tee "$out/estimate-cpu-profile.log"
fi
if [[ $parts == *looped* ]]; then
    ws=looped-paper
    rm -rf "$ws" && mkdir -p "$ws" && cp -r conf "$ws/"
    ( cd "$ws" && python3 -m arithrepro.cli compose-params -S profile=paper ${LOOPED_SET:-} \
        && python3 -m arithrepro.cli generate-datasets --task looped \
        && for model in standard looped; do
               start=$SECONDS
               python3 -m arithrepro.cli train --task looped \
                   $model-notebook-0 $model-notebook-1 $model-notebook-2 || exit 1
               echo "looped: $model, seeds 0-2 as one ensemble, trained in $((SECONDS - start)) s"
               for seed in 0 1 2; do
                   python3 -m arithrepro.cli evaluate --task looped $model-notebook-$seed || exit 1
               done
           done \
        && python3 -m arithrepro.cli render-figures --task looped ) 2>&1 | tee "$out/looped.log"
    tar czf "$out/looped-paper.tar.gz" --exclude='*.pt' --exclude='data' -C "$ws" .
fi
if [[ $parts == *processes* ]]; then
    ws=processes-paper
    rm -rf "$ws" && mkdir -p "$ws" && cp -r conf "$ws/"
    ( cd "$ws" && python3 -m arithrepro.cli compose-params -S profile=paper >/dev/null ) \
        && for p in ${PROCESSES:-2 4 8}; do
               python3 -m benchmarks.bench_ensemble --params "$ws/params.yaml" --processes $p \
                   --only "${PROCESSES_ONLY:-modular}"
           done 2>&1 | tee "$out/processes.log"
fi
if [[ $parts == *compile* ]]; then
    python3 -m benchmarks.run --only compile 2>&1 | tee "$out/compile.log"
fi
if [[ $parts == *ensemble* ]]; then
    python3 -m benchmarks.run --only ensemble,copies 2>&1 | tee "$out/ensemble.log"
fi
