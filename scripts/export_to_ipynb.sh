#!/usr/bin/env bash
# Export the marimo notebooks to Jupyter notebooks for Colab or a rented GPU, each with a setup cell.
#
#   scripts/export_to_ipynb.sh                      # every notebook in notebooks/
#   scripts/export_to_ipynb.sh notebooks/03_sft.py  # just these
#
# Environment: OUT_DIR (default build/ipynb), AGENTRL_GIT_URL and AGENTRL_REF (what the setup cell clones on a
# machine without agentrl; default https://github.com/agentrl/agentrl.git at main).
# A notebook that fails to export fails the script (non-zero exit), and nothing half-written is left for it.
set -euo pipefail
cd "$(dirname "$0")/.."

out="${OUT_DIR:-build/ipynb}"
git_url="${AGENTRL_GIT_URL:-https://github.com/agentrl/agentrl.git}"
ref="${AGENTRL_REF:-main}"
if command -v uv >/dev/null 2>&1; then run=(uv run --no-sync); else run=(python3 -m uv run --no-sync); fi
mkdir -p "$out"

notebooks=("$@")
if [ ${#notebooks[@]} -eq 0 ]; then notebooks=(notebooks/*.py); fi

for nb in "${notebooks[@]}"; do
  if [ ! -f "$nb" ]; then echo "error: $nb: no such notebook" >&2; exit 2; fi
  name="$(basename "$nb" .py)"
  tmp="$out/.$name.ipynb.tmp"
  if ! "${run[@]}" marimo export ipynb "$nb" -o "$tmp" --sort top-down -f >/dev/null; then
    rm -f "$tmp"
    echo "error: $nb: marimo export failed" >&2
    exit 1
  fi
  "${run[@]}" python -m agentrl.colab "$tmp" --git-url "$git_url" --ref "$ref"
  mv "$tmp" "$out/$name.ipynb"
  echo "wrote $out/$name.ipynb"
done
