from benchmarks.batcher_path import measure


async def test_the_batching_path_answers_and_reports_its_cost():
    rate, cpu_us = await measure(seconds=0.5, clients=4)
    assert rate > 0 and cpu_us > 0
