"""check(): statuses, summaries, and how a learner's stub or crash is reported."""

from __future__ import annotations

import pytest
import torch

from minimodel.grading import check, exercises
from minimodel.grading.core import (
    _REGISTRY,
    CheckFailed,
    exercise,
    expect_close,
    expect_shape,
)


@pytest.fixture
def toy():
    name = "test.double"

    @exercise(name, "doubles random vectors")
    def _values(fn):
        x = torch.randn(5)
        expect_close(fn(x), 2 * x, "fn(x)")

    @exercise(name, "keeps the shape")
    def _shape(fn):
        expect_shape(fn(torch.randn(2, 3)), (2, 3), "fn(x)")

    yield name
    _REGISTRY.pop(name)


def test_correct_function_passes(toy):
    result = check(toy, lambda x: x + x)
    assert result.passed and result.score == (2, 2)
    assert "2/2" in str(result) and "✓" in result._repr_html_()


def test_wrong_function_fails_with_a_reason(toy):
    result = check(toy, lambda x: 3 * x)
    assert not result.passed
    assert result.outcomes[0].status == "fail" and "max abs diff" in result.outcomes[0].message
    assert result.outcomes[1].passed


def test_stub_reports_not_implemented_and_does_not_raise(toy):
    def stub(x):
        raise NotImplementedError("your code here")

    result = check(toy, stub)
    assert not result.passed and not result.implemented
    assert "not implemented yet" in str(result)


def test_crash_is_reported_with_the_exception(toy):
    result = check(toy, lambda x: x.no_such_method())
    assert [o.status for o in result.outcomes] == ["error", "error"]
    assert "AttributeError" in result.outcomes[0].message


def test_unknown_exercise_lists_the_known_ones():
    with pytest.raises(KeyError, match="No exercise named"):
        check("ch99.nothing", lambda: None)


def test_expect_shape_rejects_non_tensors():
    with pytest.raises(CheckFailed, match="torch.Tensor"):
        expect_shape([1, 2], (2,), "x")


def test_every_registered_exercise_has_checks():
    for name, titles in exercises().items():
        assert titles, name
