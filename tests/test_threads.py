"""`lakecompute.threads.in_background`: a function's result (or its exception) from a named thread."""

from __future__ import annotations

import threading

import pytest

from lakecompute.errors import InvalidArgumentError
from lakecompute.threads import in_background


def test_the_result_comes_from_a_named_thread_and_every_wait_gives_it() -> None:
    go = threading.Event()

    def work() -> tuple[str, int]:
        assert go.wait(timeout=20)  # still running when the caller goes on
        return threading.current_thread().name, 42

    wait = in_background("probe", work)
    go.set()
    assert wait() == ("lakecompute-probe", 42)
    assert wait() == ("lakecompute-probe", 42)


def test_what_the_function_raised_is_raised_where_it_is_waited_for() -> None:
    def work() -> None:
        raise InvalidArgumentError("no such file")

    wait = in_background("probe", work)
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="no such file"):
            wait()
