"""common.inputs.parsed reuses one serializer per class and thread: each body is
still judged on its own."""

from __future__ import annotations

import threading

import pytest
from rest_framework.exceptions import ValidationError

from common.inputs import parsed
from coordination.serializers import ClaimSerializer

GOOD = {"where": {"status": "pending"}, "set": {"status": "claimed"}}


def test_a_bad_body_then_a_good_one_validates_the_good_one_cleanly():
    with pytest.raises(ValidationError) as refused:
        parsed(ClaimSerializer, {**GOOD, "surprise": 1})
    assert refused.value.detail == {"surprise": ["Unknown field."]}

    assert parsed(ClaimSerializer, GOOD)["set"] == {"status": "claimed"}


def test_validate_reads_the_body_of_its_own_call_not_the_last_one():
    assert parsed(ClaimSerializer, GOOD)["where"] == {"status": "pending"}
    with pytest.raises(ValidationError):
        parsed(ClaimSerializer, {**GOOD, "other": 2})


def test_threads_validating_at_once_each_get_their_own_answer():
    errors: list[str] = []

    def claimant(n: int) -> None:
        for i in range(300):
            body = {"where": {"n": n, "i": i}, "set": {"by": n}}
            if i % 3 == 0:
                body["unknown"] = True
                try:
                    parsed(ClaimSerializer, body)
                    errors.append(f"{n}/{i} accepted an unknown field")
                except ValidationError:
                    pass
            elif parsed(ClaimSerializer, body)["where"] != {"n": n, "i": i}:
                errors.append(f"{n}/{i} got another body")

    threads = [threading.Thread(target=claimant, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_a_body_is_not_kept_once_validated():
    parsed(ClaimSerializer, GOOD)
    from common import inputs

    for serializer in inputs._reused.by_class.values():
        assert not hasattr(serializer, "initial_data")
