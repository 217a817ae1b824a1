#!/usr/bin/env bash
# The mutant suite (tests/mutants/): plants classic kernel bugs in the solutions and checks
# that the tests catch AND name each one. Options and format: tools/run_mutants.py --help,
# tests/mutants/README.md.
#   bash tools/run_mutants.sh [NAME...] [--suite kernel|exercise|all] [--mode plain|check]
#                              [--timeout S] [--jobs N]
# --suite exercise: tests/exercise_mutants/, wrong answers to the exercises (make ci).
exec python3 "$(dirname "$0")/run_mutants.py" "$@"
