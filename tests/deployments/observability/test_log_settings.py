import logging
import re

import pytest

from deployments.observability.log_settings import (
    LogSettings,
    TritonFormatter,
    apply_log_settings,
    reset_log_settings,
)
from repo_adapter.errors import InferenceServerError


@pytest.fixture(autouse=True)
def restore_defaults():
    yield
    reset_log_settings()  # other tests of this process see Python's logging untouched


def test_defaults_are_tritons():
    assert LogSettings().to_json() == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }


@pytest.mark.parametrize(
    "changes, message, code",
    [
        ({"log_info": "yes"}, "attempt to access JSON non-boolean as boolean", "INVALID_ARG"),
        ({"log_verbose_level": -1}, "non-unsigned-integer as unsigned-integer", "INVALID_ARG"),
        ({"log_verbose_level": True}, "non-unsigned-integer", "INVALID_ARG"),
        ({"log_format": "json"}, "invalid argument for --log_format, got: json", "INVALID_ARG"),
        ({"log_file": "/tmp/x.log"}, "can not be updated through network", "UNSUPPORTED"),
    ],
)
def test_bad_settings_are_refused_as_triton_refuses_them(changes, message, code):
    settings = LogSettings()
    with pytest.raises(InferenceServerError, match=message) as refused:
        settings.updated({"log_error": False, **changes})
    assert refused.value.code.name == code
    assert settings == LogSettings()


def test_unknown_settings_are_ignored_as_triton_ignores_them():
    assert LogSettings().updated({"no_such": 1, "log_info": False}) == LogSettings(log_info=False)


def test_levels_follow_the_settings_in_child_loggers(tmp_path):
    log_file = tmp_path / "rayton.log"
    child = logging.getLogger("deployments.some.module")
    apply_log_settings(LogSettings(log_file=str(log_file), log_info=False))
    child.info("an info line")
    child.warning("a warning line")
    child.debug("a verbose line")
    apply_log_settings(LogSettings(log_file=str(log_file), log_verbose_level=1))
    child.debug("a verbose line now")
    logging.getLogger("rayton.python_model").info("a model's line")
    text = log_file.read_text()
    assert "an info line" not in text and "a verbose line\n" not in text
    assert "a warning line" in text and "a verbose line now" in text
    assert "a model's line" in text
    warning = next(line for line in text.splitlines() if "a warning line" in line)
    assert warning.startswith("W") and "test_log_settings.py:" in warning


def test_iso8601_format():
    record = logging.LogRecord("deployments.x", logging.ERROR, "/a/b/file.py", 7, "boom", (), None)
    record.created = 0.0
    assert TritonFormatter("ISO8601").format(record) == "1970-01-01T00:00:00Z E file.py:7] boom"
    default = TritonFormatter("default").format(record)  # glog style, local time
    assert re.fullmatch(r"E\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ file\.py:7\] boom", default)
