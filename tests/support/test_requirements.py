"""A missing component skips a test on a developer's machine and fails it in CI."""

from __future__ import annotations

import pytest

from tests.support.requirements import missing


@pytest.mark.parametrize("value", ["true", "1", "TRUE"])
def test_in_ci_a_missing_component_fails_the_test(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="required in CI, missing: the server"):
        missing("the server")


@pytest.mark.parametrize("value", [None, "", "false"])
def test_elsewhere_it_skips_with_the_reason(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="the server"):
        missing("the server")
