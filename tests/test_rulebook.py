"""The rule book: every rule names its moments, each moment's preflight runs exactly its rules,
a refusal is a typed value, and docs/operations.md shows the book as it is."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from shard_pipeline.contract.replace import TMP_MARKER, parking_dir_for, tmp_dir_for
from shard_pipeline.errors import UserError
from shard_pipeline.run import rulebook
from shard_pipeline.run.claim import claim_path
from shard_pipeline.run.rulebook import RULES, Context, Moment, preflight, rules_for

OPERATIONS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def test_every_rule_names_its_moments_and_one_kind_of_its_own():
    assert all(rule.moments and rule.moments <= set(Moment) for rule in RULES)
    assert len({rule.kind for rule in RULES}) == len(RULES)


@pytest.mark.parametrize("moment", list(Moment))
def test_each_moments_preflight_runs_exactly_the_rules_that_name_it(moment, monkeypatch, tmp_path):
    ran: list[str] = []
    recording = tuple(dataclasses.replace(rule, check=lambda ctx, kind=rule.kind: ran.append(kind)) for rule in RULES)
    monkeypatch.setattr(rulebook, "RULES", recording)
    preflight(moment, Context(tmp_path / "out", tmp_path / "run"))
    assert ran == [rule.kind for rule in RULES if moment in rule.moments]
    assert [r.kind for r in rules_for(moment)] == ran


def test_every_moment_checks_some_rule():
    assert all(rules_for(moment) for moment in Moment)


def refusal_of(moment: Moment, ctx: Context) -> rulebook.Refusal:
    with pytest.raises(UserError) as e:
        preflight(moment, ctx)
    return e.value.refusal


def test_a_staging_folder_nobody_marked_is_refused_with_its_paths_and_no_owner(tmp_path):
    out = tmp_path / "out"
    tmp_dir_for(out).mkdir()
    (tmp_dir_for(out) / "notes.txt").write_text("mine")
    got = refusal_of(Moment.SUBMIT, Context(out, tmp_path / "run"))
    assert (got.kind, got.owner) == ("staging-not-ours", None)
    assert got.paths == (tmp_dir_for(out), parking_dir_for(out))


def test_another_runs_staging_folder_names_that_run_as_its_owner(tmp_path):
    out, other = tmp_path / "out", tmp_path / "other-run"
    tmp_dir_for(out).mkdir()
    (tmp_dir_for(out) / TMP_MARKER).write_text(f"{other}\n")
    got = refusal_of(Moment.NEW_RUN, Context(out, tmp_path / "run"))
    assert (got.kind, got.owner) == ("staging-not-ours", str(other))


def test_a_staging_folder_is_not_checked_at_a_resume_once_the_plan_made_it(tmp_path):
    out = tmp_path / "out"
    tmp_dir_for(out).mkdir()
    (tmp_dir_for(out) / TMP_MARKER).write_text(f"{tmp_path / 'other-run'}\n")
    preflight(Moment.RESUME, Context(out, tmp_path / "run", planning=False))


def test_an_out_held_by_another_run_names_that_run(tmp_path):
    out, other = tmp_path / "out", tmp_path / "other-run"
    claim_path(out).write_text(f"{other}\n")
    got = refusal_of(Moment.RESUME, Context(out, tmp_path / "run", planning=False))
    assert (got.kind, got.owner, got.paths) == ("out-held", str(other), (out, claim_path(out)))
    preflight(Moment.FINALIZE, Context(out, tmp_path / "run"))  # finalize releases the claim; it never checks it


def test_operations_md_shows_the_rule_book_as_it_is():
    text = OPERATIONS.read_text(encoding="utf-8")
    shown = text.split("<!-- rulebook:begin -->\n", 1)[1].split("\n<!-- rulebook:end -->", 1)[0]
    assert shown == rulebook.table(), "docs/operations.md: run python -m shard_pipeline.run.rulebook --table"


def test_a_run_dir_inside_out_is_refused_at_a_new_run_naming_both(tmp_path):
    out = tmp_path / "out"
    got = refusal_of(Moment.NEW_RUN, Context(out, out / "run"))
    assert (got.kind, got.paths) == ("paths-apart", (out, out / "run"))
