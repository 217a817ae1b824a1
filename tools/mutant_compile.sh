#!/bin/sh
# The compiler launcher of the mutant suites' plain builds (tools/run_mutants.py, when ccache
# is CI's launcher): runs the compile command it is given, with PA_MUTANT_OPT (-O1, chapter 9's
# -O0) in place of its optimisation level when that is set. The scratch builds keep the main
# build's command lines (-O2), so ccache serves their first build from it; only what a mutant
# makes recompile runs with PA_MUTANT_OPT, set for that build alone. Ninja tracks command
# lines, not the environment, so the swap itself never rebuilds anything.
#   usage: mutant_compile.sh [LAUNCHER...] COMPILER ARGS...
if [ -n "${PA_MUTANT_OPT:-}" ]; then
    for arg; do
        shift
        case $arg in
            -O0 | -O1 | -O2 | -O3 | -Og | -Os | -Ofast) set -- "$@" "$PA_MUTANT_OPT" ;;
            *) set -- "$@" "$arg" ;;
        esac
    done
fi
exec "$@"
