#!/usr/bin/env bash
# Export the marimo notebooks to Jupyter notebooks for Colab or a rented GPU, each with a setup cell.
#
#   scripts/export_to_ipynb.sh                      # every notebook in notebooks/ -> build/ipynb/
#   scripts/export_to_ipynb.sh notebooks/03_sft.py  # just these
#   scripts/export_to_ipynb.sh --bundle             # + build/ipynb/agentrl_bundle/: a wheel, configs/, data/samples/
#
# The setup cell clones AGENTRL_GIT_URL at AGENTRL_REF on a machine without agentrl. Defaults: the URL of this
# checkout's `origin` remote and the current branch. An origin that is a local path (a clone made with
# `git clone . dir`) is followed to that repository's own origin; with no network URL at the end of the chain
# the script stops and asks for AGENTRL_GIT_URL (or --bundle). With --bundle the notebooks need no clone at all:
# copy the output directory to the GPU machine (scp -r build/ipynb gpu:) and open the notebooks there; the setup
# cell installs the wheel next to them together with the pinned GPU stack. An SSH origin is written as its https
# form, and credentials in an https origin are dropped.
# OUT_DIR sets the output directory. Works in a fresh clone before `uv sync` (marimo runs from uv's tool cache).
# A notebook that fails to export fails the script (non-zero exit), and nothing half-written is left for it.
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=0
notebooks=()
for arg in "$@"; do
  case "$arg" in
    --bundle) bundle=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) notebooks+=("$arg") ;;
  esac
done
if [ ${#notebooks[@]} -eq 0 ]; then notebooks=(notebooks/*.py); fi
out="${OUT_DIR:-build/ipynb}"

if command -v uv >/dev/null 2>&1; then uv=(uv); else uv=(python3 -m uv); fi
python=python3
if [ -x .venv/bin/python ] && .venv/bin/python -c "import marimo" 2>/dev/null; then
  marimo=(.venv/bin/python -m marimo)
  python=.venv/bin/python
else  # a fresh clone: the locked marimo from uv's tool cache, no project environment needed
  locked() { sed -n "/^name = \"$1\"\$/{n;s/^version = \"\(.*\)\"\$/\1/p;}" uv.lock; }
  marimo=("${uv[@]}" tool run --from "marimo==$(locked marimo)" --with "nbformat==$(locked nbformat)" marimo)
fi

# the clone URL: AGENTRL_GIT_URL, else origin (followed through local-path origins to a network URL); SSH forms are
# turned into https and credentials (https://user:token@host/...) dropped, so no key or token lands in a notebook
origin_url() {
  local dir="$PWD" url
  for _ in 1 2 3 4 5; do
    url="$(git -C "$dir" remote get-url origin 2>/dev/null)" || return 1
    case "$url" in
      http://*|https://*|ssh://*|git://*|*@*:*) echo "$url"; return 0 ;;
      file://*) url="${url#file://}" ;;
    esac
    case "$url" in /*) dir="$url" ;; *) dir="$dir/$url" ;; esac
    [ -d "$dir" ] || return 1
  done
  return 1
}
git_url="${AGENTRL_GIT_URL:-}"
if [ -z "$git_url" ] && ! git_url="$(origin_url)"; then
  if [ "$bundle" -eq 0 ]; then
    echo "error: no clone URL: this checkout has no origin remote with a network URL (a local-path origin is" \
         "followed to its own origin). Set AGENTRL_GIT_URL=https://github.com/<you>/agentrl.git, or export with" \
         "--bundle to carry the code next to the notebooks." >&2
    exit 2
  fi
  git_url=""
fi
if [ -n "$git_url" ]; then
  git_url="$(PYTHONPATH=lib "$python" -m agentrl.colab clone-url "$git_url")" || exit 2
fi
ref="${AGENTRL_REF:-$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo main)}"
if [ "$ref" = "HEAD" ]; then ref=main; fi

mkdir -p "$out"
for nb in "${notebooks[@]}"; do
  if [ ! -f "$nb" ]; then echo "error: $nb: no such notebook" >&2; exit 2; fi
  name="$(basename "$nb" .py)"
  tmp="$out/.$name.ipynb.tmp"
  if ! "${marimo[@]}" export ipynb "$nb" -o "$tmp" --sort top-down -f >/dev/null; then
    rm -f "$tmp"
    echo "error: $nb: marimo export failed" >&2
    exit 1
  fi
  PYTHONPATH=lib "$python" -m agentrl.colab prepare "$tmp" --git-url "$git_url" --ref "$ref"
  mv "$tmp" "$out/$name.ipynb"
  echo "wrote $out/$name.ipynb"
done

if [ "$bundle" -eq 1 ]; then
  staging="$out/.agentrl_bundle.tmp"
  rm -rf "$staging"
  mkdir -p "$staging/data"
  "${uv[@]}" build --quiet --wheel --out-dir "$staging" . >/dev/null
  cp -R configs "$staging/configs"
  cp -R data/samples "$staging/data/samples"
  rm -rf "$out/agentrl_bundle"
  mv "$staging" "$out/agentrl_bundle"
  echo "wrote $out/agentrl_bundle ($(basename "$out"/agentrl_bundle/agentrl-*.whl), configs/, data/samples/)"
fi
echo "setup cell clones ${git_url:-nothing (bundle only)} at $ref"
