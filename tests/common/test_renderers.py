"""The API renders JSON with orjson, byte for byte what DRF's renderer gave."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid

import pytest
from rest_framework.renderers import JSONRenderer

from common.renderers import FastJSONRenderer

SAMPLES = [
    {"version": 3, "value": {"n": 1, "ratio": 0.1, "big": 2**63 - 1, "neg": -(2**63)}},
    {"text": 'Grüße, 你好, emoji 🚀, quote " backslash \\ newline \n tab \t'},
    {"js-unsafe": "line\u2028separator\u2029paragraph"},
    {"when": datetime.datetime(2026, 11, 30, 22, 1, 2, 345678, tzinfo=datetime.UTC)},
    {"day": datetime.date(2026, 11, 30), "id": uuid.UUID(int=7), "d": decimal.Decimal("1.50")},
    {"huge": 2**70, "nested": [[[]], {}, None, True, False]},
    [1, "two", 3.5, {"four": [5]}],
    {"error": {"code": "STALE_VERSION", "message": "Version 1 is not current."}},
]


@pytest.mark.parametrize("data", SAMPLES)
def test_the_fast_renderer_writes_the_same_bytes_as_drf(data):
    assert FastJSONRenderer().render(data) == JSONRenderer().render(data)


def test_small_floats_are_the_same_numbers_though_spelt_without_a_zero_in_the_exponent():
    data = {"tiny": 1.5e-07, "tinier": 5e-324, "big": 1e16}
    fast = FastJSONRenderer().render(data)
    assert fast == b'{"tiny":1.5e-7,"tinier":5e-324,"big":1e+16}'
    assert json.loads(fast) == json.loads(JSONRenderer().render(data)) == data


def test_an_indented_answer_is_still_drfs():
    context = {"indent": 2}
    data = {"a": [1, 2]}
    assert FastJSONRenderer().render(data, "application/json", context) == JSONRenderer().render(
        data, "application/json", context
    )
