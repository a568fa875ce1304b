#!/usr/bin/env bash
# The GPU path end to end on a bare machine with one NVIDIA GPU, within 35 minutes on an H100 (configs/gpu_smoke.toml,
# shaped like colab_qwen3_4b on a T4 whatever the card, and configs/gpu_smoke_trl.toml):
#   env       its own fresh Python 3.12 environment made with uv (runs/gpu_smoke/venv; uv >= 0.9.8 installed under
#             runs/gpu_smoke/uv when the machine has none)
#   install   the notebooks exported with --bundle and their setup cell run headless in that environment: the GPU
#             stack for this driver (python -m agentrl.colab plan shows which) and agentrl in one uv call; then every
#             exported notebook's setup cell again, which must find everything installed
#   measure   agentrl gpu-plan --measure: 3 SFT and 2 GRPO steps with random weights of the preset's model on this
#             card, measured peak memory and step time against the plan (before any weights are downloaded)
#   data      corpus + hybrid index (MiniLM, bundled HotpotQA sample), oracle trajectories, curated SFT data
#   sft       20 Unsloth QLoRA steps (4-bit) on Qwen/Qwen3-0.6B with the detected card's [gpu.<CARD>] table, merged
#             16-bit model (checkpoint at step 10)
#   grpo      GRPO from that adapter, 4-bit weights shared with a colocated vLLM (fast_inference, vllm-bnb-plugin),
#             killed with SIGKILL once its step-2 checkpoint is complete
#   resume    the same command with --resume: from checkpoint-2 to step 4
#   grpo-trl  2 GRPO steps on the transformers backend with TRL's colocated vLLM (16-bit)
#   serve     the base model with the SFT adapter behind the environment's vLLM OpenAI server (LoRA rank 64, hermes)
#   eval      the agent over HTTP on 20 held-out questions against that server
# and prints one PASS/FAIL/TIMEOUT table with the total time (exit 1 when a step fails; a failed step's line says
# what to do). Every step has a time limit (seconds below) and the whole run a deadline of SMOKE_TOTAL seconds
# (default 2100): a step gets the smaller of its limit and the time left, is killed when it runs over and shows as
# TIMEOUT; later steps are skipped. The limits are budgets for one H100, not measurements (no GPU has run this
# script yet); the assumption behind each is next to it below. CPU CI covers the configs, the install plans, the
# memory estimate, `gpu-plan --measure` at tiny shapes and Unsloth's CPU backend (docs/colab.md).
#
#   scripts/gpu_smoke.sh              # run it
#   scripts/gpu_smoke.sh --dry-run    # print the plan with each step's time limit, run nothing
#   SMOKE_PYTHON=~/venv/bin/python    # use this Python (>= 3.11, its vllm next to it) instead of making one
#   SMOKE_PORT=8011 SMOKE_TOTAL=2100 AGENTRL_GPU_STACK=cu128 scripts/gpu_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."

dry=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

log_dir=runs/gpu_smoke
venv="$log_dir/venv"
py="${SMOKE_PYTHON:-$venv/bin/python}"
case "$py" in /*) ;; */*) py="$PWD/$py" ;; *) py="$(command -v "$py" || echo "$PWD/$py")" ;; esac  # absolute
bin_dir="$(dirname "$py")"  # the environment's own vllm is there, whatever is on PATH
port="${SMOKE_PORT:-8011}"
total="${SMOKE_TOTAL:-2100}"
preset=configs/gpu_smoke.toml
trl_preset=configs/gpu_smoke_trl.toml
adapter=runs/sft/gpu-smoke/adapter
grpo_dir=runs/grpo/gpu-smoke
nb_dir="$log_dir/notebooks"
cli=("$py" -m agentrl.cli)
export UNSLOTH_AUTO_INSTALL=0 TOKENIZERS_PARALLELISM=false
case "$total" in ''|*[!0-9]*) echo "error: SMOKE_TOTAL must be a number of seconds (got '$total')" >&2; exit 2 ;; esac

steps=(env install measure data sft grpo resume grpo-trl serve eval)
# per-step limits in seconds for one H100, each an assumption until a GPU run measures it; they add up to the deadline
declare -A limit=(
  [env]=60        # uv venv: seconds; installing uv itself: one 40 MB download
  [install]=600   # torch + vLLM + their CUDA libraries, about 4 GB: 10 MB/s on a slow link is 400 s, plus the install
  [measure]=240   # 1.2 GB of random weights written, 3 + 2 short steps, one cold vLLM start (90-150 s with graphs)
  [data]=120      # MiniLM over 200 questions' passages on the GPU, oracle trajectories: CPU-bound, ~60 s here
  [sft]=180       # Qwen3-0.6B download (1.5 GB) + 20 QLoRA steps + the 16-bit merge
  [grpo]=240      # one cold vLLM start (90-150 s) + 2 steps + a checkpoint
  [resume]=200    # one cold vLLM start + 2 steps
  [grpo-trl]=200  # one cold vLLM start (TRL colocate, 16-bit) + 2 steps
  [serve]=180     # one cold vLLM start with LoRA and CUDA graphs
  [eval]=80       # 20 agent episodes over HTTP against that server
)
# what to do when a step fails (printed with its log's path)
declare -A hint=(
  [env]="uv could not make a Python 3.12 environment: install uv >= 0.9.8 (pip install -U uv) or set SMOKE_PYTHON"
  [install]="see the log: 'python -m agentrl.colab plan' names the stack for this driver; AGENTRL_GPU_STACK=cu128 for a CUDA 12.8 driver; a TIMEOUT on a slow link: raise SMOKE_TOTAL"
  [measure]="the table in the log says which phase does not fit and what to change in configs/gpu_smoke.toml (runs/gpu_plan/gpu_smoke/measure.json)"
  [data]="the corpus/index/eval/curate commands in the log; rerun one by hand with the same arguments"
  [sft]="check the sft log for the backend line (unsloth expected) and the [gpu.<CARD>] line; an OOM: agentrl gpu-plan --config configs/gpu_smoke.toml"
  [grpo]="the grpo log: a vLLM start failure names the vLLM/torch pair (python -m agentrl.colab plan); an OOM: lower grpo.model.gpu_memory_utilization"
  [resume]="the resume log: it must start from checkpoint-2 (runs/grpo/gpu-smoke/trainer/)"
  [grpo-trl]="the grpo-trl log: TRL's colocated vLLM (vllm_gpu_memory_utilization in configs/gpu_smoke_trl.toml)"
  [serve]="the serve log: vLLM's own error (LoRA rank, memory: lower --gpu-memory-utilization)"
  [eval]="runs/eval/smoke-served/: errors per item (error_kind) and the server log"
)
serve_cmd=("$bin_dir"/vllm serve Qwen/Qwen3-0.6B --enable-lora --max-lora-rank 64 --lora-modules "smoke=$adapter" \
           --port "$port" --max-model-len 4096 --gpu-memory-utilization 0.5 \
           --enable-auto-tool-choice --tool-call-parser hermes)
make_env="uv venv --clear --python 3.12 $venv"
if [ -n "${SMOKE_PYTHON:-}" ]; then make_env="check that $py is Python >= 3.11"; fi
declare -A plan=(
  [env]="$make_env"
  [install]="OUT_DIR=$nb_dir scripts/export_to_ipynb.sh --bundle; the setup cell of $nb_dir/00_corpus.ipynb run by $py (installs the stack of: python -m agentrl.colab plan), then every notebook's cell again: nothing left to install"
  [measure]="${cli[*]} gpu-plan --config $preset --measure   # random weights, 3 SFT + 2 GRPO steps, peak vs plan"
  [data]="${cli[*]} corpus --config $preset && ${cli[*]} index --corpus runs/corpus/hotpotqa_sample --config $preset && ${cli[*]} eval --config $preset --resume && ${cli[*]} curate runs/eval/smoke-oracle --config $preset && ${cli[*]} export runs/data/gpu-smoke --formats trl"
  [sft]="${cli[*]} sft --config $preset --overwrite   # 20 steps on unsloth, 4-bit, the card's [gpu.*] table, merged/"
  [grpo]="${cli[*]} grpo --config $preset --overwrite &   # 4-bit + fast_inference; kill -9 after checkpoint-2"
  [resume]="${cli[*]} grpo --config $preset --resume   # from checkpoint-2 to step 4"
  [grpo-trl]="${cli[*]} grpo --config $trl_preset --overwrite   # 2 steps, transformers + TRL vLLM colocate"
  [serve]="${serve_cmd[*]} &"
  [eval]="${cli[*]} eval --config $preset --policy endpoint --model smoke --base-url http://127.0.0.1:$port/v1 --name smoke-served --split heldout --overwrite   # expects 20 answered, 0 errors"
)
if [ "$dry" -eq 1 ]; then
  echo "gpu_smoke plan (nothing is run; logs would go to $log_dir/; deadline ${total} s):"
  for s in "${steps[@]}"; do printf '  %-8s %4s s  %s\n' "$s" "${limit[$s]}" "${plan[$s]}"; done
  exit 0
fi

if ! command -v nvidia-smi >/dev/null 2>&1; then echo "error: no nvidia-smi: this needs an NVIDIA GPU" >&2; exit 2; fi
mkdir -p "$log_dir"
declare -A result seconds
server="" trainer=""
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; fi
  if [ -n "$trainer" ]; then kill -9 -- "-$trainer" 2>/dev/null || true; fi
}
trap cleanup EXIT

metric() {  # metric FILE EXPR: a value read from a JSON file (m) by this environment's Python
  "$py" -c "import json, sys; m = json.load(open(sys.argv[1])); print($2)" "$1"
}
card_applied() { grep -q "GPU class .*: the preset's \[gpu\..*\] settings apply" "$1"; }
check_sft() {
  [ "$(metric runs/sft/gpu-smoke/metrics.json 'm["steps"] == 20 and m["backend"] == "unsloth"')" = True ] &&
  [ "$(metric runs/sft/gpu-smoke/manifest.json 'm["config"]["model"]["load_in_4bit"] is True')" = True ] &&
  [ -f runs/sft/gpu-smoke/merged/config.json ] && card_applied "$log_dir/sft.log"
}
check_resume() {
  [ "$(metric "$grpo_dir/metrics.json" 'm["steps"] == 4 and m["resumed_from"] == "checkpoint-2" and m["backend"] == "unsloth"')" = True ] &&
  [ "$(metric "$grpo_dir/manifest.json" 'm["config"]["model"]["fast_inference"] and m["config"]["model"]["load_in_4bit"]')" = True ]
}
check_trl() {
  [ "$(metric runs/grpo/gpu-smoke-trl/metrics.json 'm["steps"] == 2 and m["backend"] == "transformers"')" = True ] &&
  [ "$(metric runs/grpo/gpu-smoke-trl/manifest.json 'm["config"]["use_vllm"] and m["config"]["vllm_mode"] == "colocate"')" = True ]
}
check_eval() { [ "$(metric runs/eval/smoke-served/metrics.json 'm["n"] == 20 and m["errors"] == 0')" = True ]; }

step_end=0
# bounded CMD...: run CMD with what is left of the current step's time; exit 124 when it ran over
bounded() {
  local left=$((step_end - SECONDS))
  if [ "$left" -le 0 ]; then return 124; fi
  timeout --kill-after=10 "$left" "$@"
}
uv_bin=""
recent_uv() {  # recent_uv PATH: a uv >= 0.9.8 (the setup's floor, agentrl.colab.UV_FLOOR: --excludes, --torch-backend)
  local v
  v="$("$1" --version 2>/dev/null | awk '{print $2}')" || return 1
  [ -n "$v" ] && [ "$(printf '%s\n0.9.8\n' "$v" | sort -V | head -1)" = 0.9.8 ]
}
ensure_uv() {  # uv on PATH (the setup cell runs it from there), installed under runs/gpu_smoke/uv when missing or old
  if command -v uv >/dev/null 2>&1 && recent_uv "$(command -v uv)"; then uv_bin="$(command -v uv)"
  elif [ -x "$log_dir/uv/uv" ]; then uv_bin="$log_dir/uv/uv"
  else
    curl -LsSf https://astral.sh/uv/install.sh | env UV_UNMANAGED_INSTALL="$PWD/$log_dir/uv" sh || return 1
    uv_bin="$log_dir/uv/uv"
  fi
  PATH="$(cd "$(dirname "$uv_bin")" && pwd):$PATH"
  export PATH
}
setup_cell() {  # setup_cell NOTEBOOK: the notebook's first cell (the setup cell), run headless by $py next to it
  "$py" -c "import json, sys; print(''.join(json.load(open(sys.argv[1]))['cells'][0]['source']))" "$1" \
    > "$log_dir/setup_cell.py" && (cd "$nb_dir" && bounded "$py" "$OLDPWD/$log_dir/setup_cell.py")
}
install_step() {
  ensure_uv && PYTHONPATH=lib "$py" -m agentrl.colab plan &&
  OUT_DIR="$nb_dir" bounded scripts/export_to_ipynb.sh --bundle &&
  setup_cell "$nb_dir/00_corpus.ipynb" || return 1
  "$py" -c "import torch, vllm; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), vllm.__version__)"
  local nb out
  for nb in "$nb_dir"/*.ipynb; do  # each exported notebook's cell now finds the stack installed
    out="$(setup_cell "$nb" 2>&1)" || { echo "$out"; return 1; }
    echo "$out"
    case "$out" in *"installed already"*) ;; *) echo "$nb: its setup cell did not find the stack installed"; return 1 ;; esac
    case "$out" in *" pip install "*) echo "$nb: its setup cell installed again"; return 1 ;; esac
  done
}
grpo_killed_after_checkpoint() {  # run GRPO in its own process group; SIGKILL it once checkpoint-2 is complete
  setsid "${cli[@]}" grpo --config "$preset" --overwrite &
  trainer=$!
  while [ "$SECONDS" -lt "$step_end" ] && kill -0 "$trainer" 2>/dev/null; do
    if [ -f "$grpo_dir/trainer/checkpoint-2/trainer_state.json" ]; then
      kill -9 -- "-$trainer"; wait "$trainer" 2>/dev/null || true; trainer=""
      sleep 5  # the driver frees the killed processes' GPU memory
      [ ! -f "$grpo_dir/metrics.json" ] || { echo "the run finished before it was killed"; return 1; }
      return 0
    fi
    sleep 1
  done
  if kill -0 "$trainer" 2>/dev/null; then kill -9 -- "-$trainer"; trainer=""; return 124; fi
  echo "GRPO exited before writing checkpoint-2"; return 1
}
wait_server() {
  while [ "$SECONDS" -lt "$step_end" ]; do
    if ! kill -0 "$server" 2>/dev/null; then return 1; fi
    if "$py" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
        "http://127.0.0.1:$port/v1/models" 2>/dev/null; then return 0; fi
    sleep 2
  done
  return 124
}

run_step() {
  local s="$1" start=$SECONDS rc=0 left=$((total - SECONDS)) log="$log_dir/$1.log"
  step_end=$((SECONDS + (left < limit[$s] ? left : limit[$s])))
  echo "== $s (limit $((step_end - SECONDS)) s): ${plan[$s]}"
  case "$s" in
    env) if [ -n "${SMOKE_PYTHON:-}" ]; then
           bounded "$py" -c "import sys; sys.exit(sys.version_info < (3, 11))" >"$log" 2>&1 || rc=$?
         else
           { ensure_uv && bounded "$uv_bin" venv --clear --python 3.12 "$venv"; } >"$log" 2>&1 || rc=$?
         fi ;;
    install) install_step >"$log" 2>&1 || rc=$? ;;
    measure) bounded "${cli[@]}" gpu-plan --config "$preset" --measure >"$log" 2>&1 || rc=$? ;;
    data) { bounded "${cli[@]}" corpus --config "$preset" &&
            bounded "${cli[@]}" index --corpus runs/corpus/hotpotqa_sample --config "$preset" --quiet &&
            bounded "${cli[@]}" eval --config "$preset" --resume &&
            bounded "${cli[@]}" curate runs/eval/smoke-oracle --config "$preset" &&
            bounded "${cli[@]}" export runs/data/gpu-smoke --formats trl; } >"$log" 2>&1 || rc=$? ;;
    sft) { bounded "${cli[@]}" sft --config "$preset" --overwrite >"$log" 2>&1 && check_sft; } || rc=$? ;;
    grpo) grpo_killed_after_checkpoint >"$log" 2>&1 || rc=$? ;;
    resume) { bounded "${cli[@]}" grpo --config "$preset" --resume >"$log" 2>&1 && check_resume; } || rc=$? ;;
    grpo-trl) { bounded "${cli[@]}" grpo --config "$trl_preset" --overwrite >"$log" 2>&1 && check_trl; } || rc=$? ;;
    serve)
      base="$(cat "$adapter/base_model.txt" 2>/dev/null || echo Qwen/Qwen3-0.6B)"
      "${serve_cmd[@]:0:2}" "$base" "${serve_cmd[@]:3}" >"$log" 2>&1 &
      server=$!
      wait_server || rc=$? ;;
    eval) { bounded "${cli[@]}" eval --config "$preset" --policy endpoint --model smoke \
              --base-url "http://127.0.0.1:$port/v1" --name smoke-served --split heldout --overwrite \
              >"$log" 2>&1 && check_eval; } || rc=$? ;;
  esac
  seconds[$s]=$((SECONDS - start))
  if [ "$rc" -eq 0 ]; then result[$s]=PASS
  elif [ "$SECONDS" -ge "$step_end" ]; then
    result[$s]=TIMEOUT; echo "   $s ran out of time: see $log; its limit is an unmeasured budget: SMOKE_TOTAL=3000 gives more"
  else result[$s]=FAIL; echo "   $s failed: see $log; ${hint[$s]}"; fi
}

failed=0
for s in "${steps[@]}"; do
  if [ "$failed" -eq 1 ]; then result[$s]=SKIP; seconds[$s]=0; continue; fi
  run_step "$s"
  if [ "${result[$s]}" != PASS ]; then failed=1; fi
done

printf '\n%-8s %-7s %8s\n' step result seconds
for s in "${steps[@]}"; do printf '%-8s %-7s %8s\n' "$s" "${result[$s]}" "${seconds[$s]}"; done
printf '%-8s %-7s %8s\n' total "$([ "$failed" -eq 0 ] && echo PASS || echo FAIL)" "$SECONDS"
exit "$failed"
