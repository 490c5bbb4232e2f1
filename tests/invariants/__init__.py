"""The fast guards of docs/DESIGN.md's invariants: tests/mutants.py runs these first."""
