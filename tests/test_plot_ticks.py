"""The plots' count axes (steps, tokens, target passes) tick on whole numbers: Plotly's own ticks put a
step 0.5 on a short decoding."""

from __future__ import annotations

from specdec.app import plots
from specdec.trace import ACCEPTED, CORRECTED, DRAFT_MODEL, DecodeResult, Encoding, Pass, Step, TokenRecord


def planted_result(num_steps: int) -> DecodeResult:
    """num_steps target passes, each drafting 3 tokens and keeping 1, then the target's own token."""
    steps = tuple(Step(index, 0, index, DRAFT_MODEL, (1, 2, 3), 1, 4) for index in range(num_steps))
    tokens = tuple(
        TokenRecord(token, label, step, 0, 0.9, 0.8)
        for step in range(num_steps)
        for token, label in ((1, ACCEPTED), (4, CORRECTED))
    )
    passes = tuple(Pass(index, 1, 0.1 * index, 0.01, 0.02) for index in range(num_steps))
    token_ids = tuple(record.token_id for record in tokens)
    return DecodeResult(token_ids, (), "en", tokens, steps, passes, (Encoding(0, "target", 1, 0.1),), 1.0)


def test_whole_ticks_are_one_two_or_five_times_a_power_of_ten():
    assert [plots.whole_ticks(largest)["dtick"] for largest in (0, 3, 10, 11, 35, 99, 101, 4_000)] == [
        1, 1, 1, 2, 5, 10, 20, 500,
    ]  # fmt: skip
    assert plots.whole_ticks(3)["tick0"] == 0


def test_the_per_pass_plot_ticks_steps_and_tokens_on_whole_numbers():
    for num_steps in (3, 250):
        figure = plots.steps_figure(planted_result(num_steps))
        steps_axis, tokens_axis = figure.layout.xaxis, figure.layout.yaxis
        assert float(steps_axis.dtick).is_integer() and steps_axis.dtick >= 1 and steps_axis.tick0 == 0
        assert float(tokens_axis.dtick).is_integer() and tokens_axis.dtick >= 1
        assert (num_steps - 1) / steps_axis.dtick <= 10  # at most about ten ticks along the steps


def test_the_live_plot_ticks_target_passes_on_whole_numbers():
    figure = plots.live_figure([], {}, 1.0, -45.0)
    assert figure.layout.yaxis2.dtick == 1 and figure.layout.yaxis2.tick0 == 0
