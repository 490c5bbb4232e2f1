"""Tests of the project itself: imports, one definition per idea, the install, the README, the fast tier, the mutants."""
