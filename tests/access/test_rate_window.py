"""The sliding-window arithmetic of the rate limits, alone: no cache, no clock."""

from access.ratelimit import WINDOW_SECONDS, sliding_window


def test_a_fresh_window_allows_up_to_the_limit_and_counts_down():
    states = [sliding_window(limit=5, previous=0, current=n, elapsed=0) for n in range(1, 7)]
    assert [s.allowed for s in states] == [True] * 5 + [False]
    assert [s.remaining for s in states[:5]] == [4, 3, 2, 1, 0]


def test_last_minute_counts_by_the_share_of_it_still_inside_the_window():
    # Halfway through this minute, half of last minute's 10 still count.
    assert sliding_window(limit=10, previous=10, current=5, elapsed=30).allowed
    assert not sliding_window(limit=10, previous=10, current=6, elapsed=30).allowed
    # At the very start all of it counts; at the end none does.
    assert not sliding_window(limit=10, previous=10, current=1, elapsed=0).allowed
    assert sliding_window(limit=10, previous=10, current=10, elapsed=WINDOW_SECONDS).allowed


def test_a_refusal_says_when_the_same_request_would_pass():
    state = sliding_window(limit=10, previous=10, current=6, elapsed=30)
    assert state.retry_after is not None and state.retry_after >= 1
    later = 30 + state.retry_after
    # Waiting that long (still this minute) lets it through with nothing else sent.
    assert sliding_window(limit=10, previous=10, current=6, elapsed=later).allowed
    assert not sliding_window(limit=10, previous=10, current=6, elapsed=later - 1.5).allowed


def test_a_full_minute_on_its_own_waits_into_the_next_one():
    state = sliding_window(limit=3, previous=0, current=4, elapsed=10)
    assert state.retry_after is not None and state.retry_after > WINDOW_SECONDS - 10


def test_headers_carry_limit_remaining_reset_and_retry_after_only_when_refused():
    ok = sliding_window(limit=2, previous=0, current=1, elapsed=20).headers()
    assert ok == {"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "40"}
    refused = sliding_window(limit=2, previous=0, current=3, elapsed=20).headers()
    assert "Retry-After" in refused
