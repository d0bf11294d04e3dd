import pytest
from pydantic import ValidationError

from deployments.metrics.options import MetricsAppArgs


def test_defaults_are_tritons():
    args = MetricsAppArgs()
    assert (args.metrics_port, args.metrics_interval_ms) == (8002, 2000)
    assert args.allow_cpu_metrics and args.allow_gpu_metrics
    assert args.setting("counter_latencies", True) is True


def test_metrics_config_last_setting_wins():
    args = MetricsAppArgs(metrics_config=["counter_latencies=false", "counter_latencies=true"])
    assert args.setting("counter_latencies", False) is True


@pytest.mark.parametrize(
    "setting, message",
    [
        ("counter_latencies", "expects <setting>=<value>"),
        ("no_such=true", "unknown --metrics-config setting 'no_such'"),
        ("counter_latencies=maybe", "must be true or false"),
        ("summary_quantiles=0.5:0.05,2:0.1", "quantiles in \\[0, 1\\], got '2:0.1'"),
    ],
)
def test_bad_metrics_config_is_refused_with_the_reason(setting, message):
    with pytest.raises(ValidationError, match=message):
        MetricsAppArgs(metrics_config=[setting])


def test_summary_quantiles_as_triton_writes_them():
    assert MetricsAppArgs().quantiles() == (0.5, 0.9, 0.95, 0.99, 0.999)
    args = MetricsAppArgs(metrics_config=["summary_quantiles=0.5:0.05,0.99:0.001"])
    assert args.quantiles() == (0.5, 0.99)
    assert MetricsAppArgs(metrics_config=["summary_latencies=true"]).setting(
        "summary_latencies", False
    )
