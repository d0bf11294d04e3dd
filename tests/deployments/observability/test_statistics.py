"""VersionStatistics recording an execution as its backend reported it (a Triton C backend's
ReportBatchStatistics / ReportStatistics), as Triton records such reports."""

from __future__ import annotations

from deployments.observability.statistics import RequestOutcome, VersionStatistics
from repo_adapter.inference_types import BackendReports, ReportedTimes


def test_reported_batches_and_requests_are_counted_as_the_backend_says():
    statistics = VersionStatistics("doubler", "1")
    # exec 1000..1400 ns, compute 1100..1300 ns
    times = ReportedTimes(1000, 1100, 1300, 1400)
    reports = BackendReports(
        batches=[(0, times), (3, times)],  # the backend's sizes, a batch of 0 rows included
        requests=[(True, times), (False, times), None],  # the last one: nothing reported
    )
    arrivals = [RequestOutcome(900, 2, False), RequestOutcome(950, 1, True)]
    arrivals.append(RequestOutcome(960, 1, False))
    statistics.record_reported(reports, arrivals)
    document = statistics.to_json()
    assert (document["execution_count"], document["inference_count"]) == (2, 3)
    assert [b["batch_size"] for b in document["batch_stats"]] == [0, 3]
    assert document["batch_stats"][1]["compute_input"] == {"count": 1, "ns": 100}
    assert document["batch_stats"][1]["compute_infer"] == {"count": 1, "ns": 200}
    assert document["batch_stats"][1]["compute_output"] == {"count": 1, "ns": 100}
    stats = document["inference_stats"]
    assert stats["success"] == {"count": 1, "ns": 500}  # arrival 900 to exec end 1400
    assert stats["queue"] == {"count": 1, "ns": 100}  # arrival 900 to exec start 1000
    assert stats["fail"] == {"count": 1, "ns": 450}
    assert stats["compute_infer"] == {"count": 1, "ns": 200}
