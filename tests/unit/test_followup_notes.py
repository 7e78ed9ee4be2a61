"""A follow-up whose new metric lacks a carried dimension drops that dimension's notes, by name."""

from __future__ import annotations

from memtool.semantic.followup import without_notes_about


def test_dropping_a_dimension_drops_the_notes_that_name_it_and_no_other() -> None:
    carried = [
        "grouping region_city",  # another dimension whose name starts with it
        "grouping region, channel",
        "filter region = 华东",
        "filter city = region北",  # a value that spells it
        "the previous question's window",
    ]
    assert without_notes_about(carried, {"region"}) == [
        "grouping region_city",
        "filter city = region北",
        "the previous question's window",
    ]
    assert without_notes_about(carried, set()) == carried
