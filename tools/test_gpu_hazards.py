"""Tests of tools/gpu_hazards.py: which mutants it runs, and how it reads compute-sanitizer."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_hazards as gh  # noqa: E402

RACE = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at void pipeline_kernel(...)+0x1a0
=========     in tests/emu/hopper_pipeline.cuh:125
=========     and Read access at void pipeline_kernel(...)+0x2b0 in tests/emu/hopper_pipeline.cuh:131 [64 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_one_mutant_per_hazard_the_plain_twin():
    names = [m["name"] for m in gh.pipeline_mutants()]
    assert names == sorted(names) and len(names) == len(set(names))
    assert not any(n.endswith("-named") for n in names)
    assert "13-store-without-proxy-fence" in names and len(names) >= 8


def test_a_report_gives_its_first_line_and_where():
    assert gh.verdict(99, RACE, 20) == ("caught, 1 hazard: Error: Race reported between Write access at "
                                        "void pipeline_kernel(...)+0x1a0 (in tests/emu/hopper_pipeline.cuh:125)")


def test_silence_a_wrong_answer_and_a_hang_are_told_apart():
    clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
    assert gh.verdict(0, clean, 20) == "silent (output right)"
    assert gh.verdict(1, clean, 20) == "silent (driver exit 1: wrong)"
    assert gh.verdict(None, "", 20) == "hang (killed after 20 s)"
