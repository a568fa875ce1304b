#!/usr/bin/env bash
# Mutation testing of the rules' owners: the held-out gate (core/heldout.py, envs/heldout.py) and the settings
# validator (core/validate.py), killed by the tests that plant violations through the entry points in-process
# (docs/decisions.md, issue 43: kill rate and survivors). mutmut 3 names a module by its path under src/, so the
# checkout is staged in a scratch directory with lib/ as src/; the results stay there (mutmut browse, mutmut show).
# `-n 0`: mutmut runs pytest in its own process and reads what ran there, so not in pyproject's xdist workers.
#   scripts/mutation.sh            # ~1-2 h on 2 cores; MUTATION_DIR=... to stage elsewhere
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${MUTATION_DIR:-$root/build/mutation}"
rm -rf "$work"
mkdir -p "$work"
cp -r "$root/lib" "$work/src"
cp -r "$root/tests" "$root/data" "$root/configs" "$root/docs" "$work/"
cp "$root/uv.lock" "$work/"
# the project's metadata without its mutmut-free sections is all mutmut copies; its settings go in setup.cfg
cp "$root/pyproject.toml" "$work/pyproject.toml"
cat > "$work/setup.cfg" <<'CFG'
[mutmut]
source_paths = src/
only_mutate =
    src/agentrl/core/heldout.py
    src/agentrl/envs/heldout.py
    src/agentrl/core/validate.py
pytest_add_cli_args_test_selection =
    tests/test_identity.py
    tests/test_ranges.py
    tests/test_settings.py
    tests/test_preset_validation.py
pytest_add_cli_args =
    -p
    no:cacheprovider
    -n
    0
also_copy =
    data/
    configs/
    docs/
process_isolation = forkserver
CFG
cd "$work"
# mutmut remembers every finished mutant: a run that stops early (mutmut 3.8 sometimes loses its working directory
# while it records a result) goes on where it stopped
for _ in 1 2 3; do
  if uv run --project "$root" mutmut run; then break; fi
done
uv run --project "$root" mutmut results --all true 2>/dev/null | awk '{print $NF}' | sort | uniq -c
