"""bench/targets.py: issue 24's targets judged from the harnesses' summaries (the figures the
README quotes come from this table, so its arithmetic is tested, not only eyeballed)."""

from __future__ import annotations

from bench.targets import TARGETS, lag_values, summary_values, verdict_table


def _row(metric: str, **brokers: list[float]) -> dict:
    return {"metric": metric, **{b.replace("_", "-"): {"values": v} for b, v in brokers.items()}}


def _verdicts(values: dict) -> dict[str, bool | None]:
    return {t.name: t.figures(values)[1] for t in TARGETS}


def _shown(values: dict, name: str) -> str:
    return next(t.figures(values)[0] for t in TARGETS if t.name == name)


def test_ratios_use_medians_and_latency_is_inverted() -> None:
    values = summary_values([
        _row("commit4_p50_ms", offsetd=[0.7, 0.8, 2.0], tansu=[0.9, 0.85, 0.1]),  # medians 0.8 vs 0.85
        _row("commit4_p99_ms", offsetd=[1.5, 1.9, 2.5]),  # median 1.9 <= 2
        _row("eos_txn_per_s", offsetd=[300.0], tansu=[600.0]),
        _row("commits_per_s", offsetd=[20_000.0], tansu=[10_000.0]),
    ])
    verdicts = _verdicts(values)
    assert verdicts["4 processes committing synchronously"] is True
    assert verdicts["transactions"] is False
    assert verdicts["async commits"] is True  # exactly 2x meets ">= 2x"
    assert _shown(values, "transactions") == "300 against 600: 0.50x"


def test_a_p50_over_tansus_misses_even_with_p99_met() -> None:
    values = summary_values([_row("commit4_p50_ms", offsetd=[0.9], tansu=[0.8]),
                             _row("commit4_p99_ms", offsetd=[1.0])])
    assert _verdicts(values)["4 processes committing synchronously"] is False


def test_cluster_rows_compare_within_the_cluster_harness() -> None:
    values = summary_values([_row("group_offsets_per_s", offsetd=[50_000.0, 60_000.0, 55_000.0],
                                  tansu=[45_000.0], offsetd_cluster=[30_000.0]),
                             _row("produce_mb_per_s", offsetd=[70.0], offsetd_cluster=[35.0])], "cluster:")
    verdicts = _verdicts(values)
    assert verdicts["100 groups committing synchronously"] is True  # medians: 55k / 45k = 1.22x
    assert verdicts["cluster produce"] is False  # 0.5x
    assert verdicts["cluster: 100 groups committing"] is False
    assert _shown(values, "100 groups committing synchronously").startswith("55,000 (50,000-60,000) against 45,000")


def test_missing_figures_are_no_data_not_a_verdict() -> None:
    table = verdict_table({})
    assert table.count("| no data |") == len(TARGETS)
    assert "not run" in table


def test_lag_scrape_median_cpu_is_read_from_its_output() -> None:
    out = "lag scrape: 2000 groups x 10 partitions\n  scrape CPU ms:  min 51, median 63, max 80\n"
    values = lag_values(out)
    assert values == {("offsetd", "scrape_cpu_ms"): [63.0]}
    assert _verdicts(values)["lag scrape, 2,000 groups x 10 partitions"] is True
    assert lag_values("crashed") == {}
