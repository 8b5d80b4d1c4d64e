"""The scope-containment rule alone (common.prefixes.scope_within)."""

from __future__ import annotations

import pytest

from common.prefixes import scope_within


@pytest.mark.parametrize(
    ("inner", "outer", "within"),
    [
        (["team-a.ci."], ["team-a."], True),
        (["team-a.", "team-b."], ["team-a.", "team-b."], True),
        (["team-a.", "team-c."], ["team-a.", "team-b."], False),
        (["team-a"], ["team-a."], False),  # "team-ab" is the inner key's, not the outer's
        (["Team-a.x"], ["team-a."], False),  # case counts
        ([], ["team-a."], False),  # an unscoped key may touch anything
        ([], [], True),
        (["team-a."], [], True),
    ],
)
def test_a_scope_is_within_another_when_each_of_its_prefixes_starts_with_one_of_the_others(
    inner, outer, within
):
    assert scope_within(inner, outer) is within
