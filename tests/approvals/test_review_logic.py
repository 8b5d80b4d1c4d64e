"""The change summary and the word-level diff, without a browser."""

from __future__ import annotations

import json

import pytest

from approvals.diffview import line_diff, pretty_lines
from approvals.review import Segment, change_summary, text_diff, word_segments
from common.boundeddiff import DiffLimits, bounded_diff

LIMITS = DiffLimits(max_bytes=10**6, max_depth=64, max_seconds=5)


def summary_of(old, new, **kw):
    patch = bounded_diff(old, new, LIMITS).patch
    return change_summary(patch, old, **kw)


def changed(segments) -> list[str]:
    return [s.text for s in segments if s.changed]


def test_a_nested_replace_is_one_row_with_its_full_path_and_both_values():
    old = {"services": {"api": {"replicas": 3, "image": "v1"}, "web": {"replicas": 2}}}
    new = {"services": {"api": {"replicas": 6, "image": "v1"}, "web": {"replicas": 2}}}
    (row,) = summary_of(old, new).rows
    assert (row.op, row.path, row.parent, row.old, row.new) == (
        "replace",
        "/services/api/replicas",
        "/services/api",
        "3",
        "6",
    )


def test_appending_to_an_array_reads_as_an_append_not_a_remove_and_add():
    (row,) = summary_of({"countries": ["ES"]}, {"countries": ["ES", "RU"]}).rows
    assert (row.op, row.path, row.parent, row.old, row.new) == (
        "append",
        "/countries/1",
        "/countries",
        "",
        '"RU"',
    )
    (dash,) = change_summary([{"op": "add", "path": "/c/-", "value": 1}], {"c": [0]}).rows
    assert dash.op == "append"


def test_an_insert_in_the_middle_of_an_array_stays_an_add():
    rows = change_summary([{"op": "add", "path": "/c/0", "value": "X"}], {"c": ["A"]}).rows
    assert [r.op for r in rows] == ["add"]


def test_removals_show_the_element_they_really_remove_after_earlier_ones_shift_the_array():
    patch = [{"op": "remove", "path": "/1"}, {"op": "remove", "path": "/1"}]
    rows = change_summary(patch, ["a", "b", "c", "d"]).rows
    assert [(r.op, r.old) for r in rows] == [("remove", '"b"'), ("remove", '"c"')]


def test_added_and_removed_members_are_marked():
    rows = summary_of({"a": 1, "gone": True}, {"a": 1, "new": {"x": 1}}).rows
    assert sorted((r.op, r.path, r.old, r.new) for r in rows) == [
        ("add", "/new", "", '{"x": 1}'),
        ("remove", "/gone", "true", ""),
    ]


def test_the_summary_is_capped_and_says_how_many_more():
    old = {f"k{n:03}": n for n in range(50)}
    new = {k: v + 1 for k, v in old.items()}
    summary = summary_of(old, new, limit=20)
    assert (len(summary.rows), summary.more) == (20, 30)


def test_a_changed_string_gets_a_line_diff_with_the_changed_words_marked():
    old = "Retention: 30 days.\nLimit: EUR 1,000 per day.\nSigned, Finance"
    new = "Retention: 90 days.\nLimit: EUR 10,000 per day.\nSigned, Finance"
    (row,) = summary_of({"policy": old}, {"policy": new}).rows
    kinds = [line.kind for line in row.text]
    assert kinds == ["del", "del", "add", "add", "same"]
    assert changed(row.text[0].segments) == ["30"] and changed(row.text[2].segments) == ["90"]
    assert changed(row.text[1].segments) == ["1"] and changed(row.text[3].segments) == ["10"]
    assert "".join(s.text for s in row.text[3].segments) == "Limit: EUR 10,000 per day."


def test_a_deleted_paragraph_shows_as_removed_lines_and_long_unchanged_text_folds():
    keep = [f"Clause {n}." for n in range(20)]
    old = "\n".join(keep[:10] + ["This paragraph goes.", "So does this one."] + keep[10:])
    new = "\n".join(keep)
    lines = text_diff(old, new)
    removed = ["".join(s.text for s in line.segments) for line in lines if line.kind == "del"]
    assert removed == ["This paragraph goes.", "So does this one."]
    assert [line.kind for line in lines].count("fold") == 2
    assert not any(line.kind == "add" for line in lines)


def test_word_segments_keep_the_whole_text_and_mark_only_what_differs():
    left, right = word_segments("keep 30 days", "keep 90 days")
    assert left == (Segment("keep "), Segment("30", True), Segment(" days"))
    assert right == (Segment("keep "), Segment("90", True), Segment(" days"))
    assert word_segments("same", "same") == ((Segment("same"),), (Segment("same"),))


@pytest.mark.parametrize(
    "value",
    [
        {"b": [1, {"x": None, "a": "é\u2028"}], "a": {}, "c": [], "d": 1.5, "a/b": {"~": True}},
        [],
        "text",
        [[[]]],
        None,
    ],
)
def test_pretty_lines_print_exactly_what_json_dumps_prints(value):
    lines, paths = pretty_lines(value)
    assert "\n".join(lines) == json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    assert len(paths) == len(lines)


def test_each_hunk_of_the_line_diff_names_the_path_it_sits_in():
    old = {"services": {f"svc{n:02}": {"replicas": 3, "port": 8000 + n} for n in range(10)}}
    new = json.loads(json.dumps(old))
    new["services"]["svc07"]["replicas"] = 6
    rows = line_diff(old, new)
    hunks = [row.text for row in rows if row.kind == "hunk"]
    assert hunks == ["/services/svc07"]
    replaced = [row for row in rows if row.kind in ("add", "del")]
    assert [changed(row.segments) for row in replaced] == [["3"], ["6"]]
