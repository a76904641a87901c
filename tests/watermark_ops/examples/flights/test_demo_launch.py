"""make run's launch choice: the faster end to end for the number of days, server start included."""

from __future__ import annotations

from watermark_ops.examples.flights.demo import choose_launch


def test_connect_wins_when_its_server_start_is_paid_back():
    figures = {"submit_run_s": 24.0, "connect_run_s": 12.0, "server_start_s": 20.0}
    assert choose_launch(3, figures)[0] == "connect"  # 72 s against 20 + 36 s
    launch, why = choose_launch(1, figures)  # 24 s against 20 + 12 s: the server start is not paid back
    assert launch == "submit" and "server start" in why and "24" in why and "32" in why


def test_without_measured_figures_the_defaults_decide():
    assert choose_launch(3)[0] == "connect"
    assert choose_launch(3, {"connect_run_s": 30.0})[0] == "submit"  # a measurement overrides a default
