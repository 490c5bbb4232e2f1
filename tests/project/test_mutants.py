"""The mutant list (tests/mutants.py) keeps up with the code: every snippet is still in its file exactly
once, every mutant still compiles and names an invariant, and every invariant has a mutant."""
from __future__ import annotations

import pytest

from tests.mutants import CHECKOUT, INVARIANTS, MUTANTS, Mutant


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutants_snippet_is_in_its_file_once_and_the_mutant_compiles(mutant: Mutant):
    source = (CHECKOUT / mutant.file).read_text(encoding="utf-8")
    assert source.count(mutant.snippet) == 1, f"{mutant.name}: update its snippet in tests/mutants.py"
    mutated = mutant.apply(source)
    assert mutated != source and mutant.invariant in INVARIANTS
    compile(mutated, mutant.file, "exec")


def test_every_invariant_has_a_mutant_and_names_are_unique():
    assert {m.invariant for m in MUTANTS} == set(INVARIANTS)
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
