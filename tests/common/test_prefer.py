"""Reading the Prefer header (RFC 7240): which requests ask for return=minimal."""

from __future__ import annotations

import pytest

from common.prefer import prefers_minimal


@pytest.mark.parametrize(
    "header",
    [
        "return=minimal",
        "Return=Minimal",
        'return="minimal"',
        " return = minimal ",
        "respond-async, return=minimal",
        "return=minimal; foo=bar",
        "wait=10,return=minimal",
    ],
)
def test_these_prefer_headers_ask_for_a_minimal_answer(header):
    assert prefers_minimal(header) is True


@pytest.mark.parametrize(
    "header",
    [
        "",
        "return=representation",
        "return=representation, return=minimal",  # only the first instance counts
        "return",
        "minimal",
        "return-minimal",
        "handling=strict",
        "return=minimalist",
        ";;,,=",
    ],
)
def test_these_prefer_headers_do_not(header):
    assert prefers_minimal(header) is False
