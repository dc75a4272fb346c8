"""The censoring-aware delayed-feedback queue (core/selection/feedback.py)."""

from __future__ import annotations

import numpy as np
import pytest

from core.selection.counterfactual import estimate_length, length_loss
from core.selection.feedback import FeedbackQueue


def test_window_completes_only_when_all_K_positions_are_known() -> None:
    gammas = np.array([[0.9, 0.8, 0.7, 0.6], [0.5, 0.4, 0.3, 0.2]])  # [N=2, 4 positions]
    queue = FeedbackQueue(2, depth=3)
    queue.open_window(10, chosen=1, realised=2)
    queue.add_gammas(10, gammas[:, :2])
    assert queue.pop_completed() == []
    queue.add_gammas(12, gammas[:, 2:])
    [window] = queue.pop_completed()
    assert (window.start, window.chosen, window.realised, window.censored) == (10, 1, 2, False)
    np.testing.assert_array_equal(window.gammas, gammas[:, :3])
    np.testing.assert_allclose(window.est_len, estimate_length(gammas[:, :3]))
    np.testing.assert_allclose(window.loss, length_loss(window.est_len, 3))
    assert queue.pop_completed() == [] and queue.open_windows == 0


def test_a_windows_loss_carries_the_costs_of_the_step_it_was_opened_in() -> None:
    queue = FeedbackQueue(2, depth=2)
    step_costs = np.array([0.03, 0.02, 0.01])
    queue.open_window(0, chosen=0, realised=2, costs=step_costs)
    queue.open_window(1, chosen=None, realised=None)  # a position window: no step
    queue.add_gammas(0, np.array([[0.9, 0.8, 0.7], [0.5, 0.4, 0.3]]))
    first, second = queue.pop_losses()
    assert first.costs is step_costs and second.costs is None


def test_a_zero_closes_a_window_early_once_every_drafter_hit_zero() -> None:
    queue = FeedbackQueue(2, depth=4)
    queue.open_window(0, chosen=0, realised=1)
    queue.add_gammas(0, np.array([[1.0], [0.0]]))  # only drafter 1 has hit zero
    assert queue.pop_completed() == []
    queue.add_gammas(1, np.array([[0.0], [1.0]]))  # now drafter 0 too
    [window] = queue.pop_completed()
    np.testing.assert_array_equal(window.gammas, [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    np.testing.assert_array_equal(window.est_len, [2.0, 1.0])
    assert not window.censored


def test_an_exact_zero_closes_a_sampled_window_early_too() -> None:
    """Issue 14: the docstring said the zero-γ early close holds when sampling; it does (the
    product is zero whatever follows), so the queue applies it whatever the decoding mode."""
    queue = FeedbackQueue(1, depth=3)
    queue.open_window(0, chosen=0, realised=1)
    queue.add_gammas(0, np.array([[0.0, 0.5]]))
    [window] = queue.pop_completed()
    assert window.est_len[0] == 1.0 and not window.censored


def test_windows_complete_in_fifo_order() -> None:
    queue = FeedbackQueue(1, depth=2)
    queue.open_window(0, chosen=0, realised=1)
    queue.add_gammas(0, np.array([[0.5]]))
    assert queue.pop_completed() == []  # needs position 1 too
    queue.open_window(1, chosen=0, realised=3)
    queue.add_gammas(1, np.array([[0.5, 0.5, 0.5]]))
    assert [w.start for w in queue.pop_completed()] == [0, 1]
    queue.open_window(4, chosen=0, realised=1)
    queue.add_gammas(4, np.array([[0.5]]))
    queue.open_window(5, chosen=0, realised=1)
    queue.add_gammas(5, np.array([[0.5]]))
    assert [w.start for w in queue.pop_completed()] == [4]
    queue.add_gammas(6, np.array([[0.5]]))
    assert [w.start for w in queue.pop_completed()] == [5]


def test_gammas_may_arrive_before_their_window_is_opened() -> None:
    queue = FeedbackQueue(1, depth=2)
    queue.add_gammas(5, np.array([[0.5, 0.25]]))
    queue.open_window(5, chosen=0, realised=2)
    [window] = queue.pop_completed()
    assert window.est_len[0] == pytest.approx(1.0 + 0.5 + 0.125)


def test_gammas_held_beyond_the_last_start_serve_the_next_windows() -> None:
    queue = FeedbackQueue(1, depth=1)
    queue.open_window(0, chosen=0, realised=1)
    queue.add_gammas(0, np.array([[0.5, 0.25, 0.125]]))
    assert [w.start for w in queue.pop_completed()] == [0]
    assert queue.buffered_positions == 2  # positions 1 and 2 may still start a window
    queue.open_window(2, chosen=0, realised=1)
    [window] = queue.pop_completed()
    assert window.est_len[0] == 1.125
    with pytest.raises(ValueError, match="increase"):
        queue.open_window(1, chosen=0, realised=1)
    queue.open_window(3, chosen=0, realised=1)  # its γ is the next to arrive
    early = FeedbackQueue(1, depth=1)
    early.add_gammas(5, np.array([[1.0]]))
    with pytest.raises(ValueError, match="no longer held"):
        early.open_window(3, chosen=0, realised=1)  # γ for 3 will never come


def test_close_judges_remaining_windows_with_unknown_positions_as_zero() -> None:
    """...and drops the windows none of whose positions was scored (issue 40, defect G: they
    entered the statistics at ÂL 1 for every drafter)."""
    queue = FeedbackQueue(2, depth=3)
    queue.open_window(0, chosen=0, realised=2)
    queue.add_gammas(0, np.array([[1.0, 1.0, 1.0], [0.5, 0.5, 0.5]]))
    queue.open_window(2, chosen=1, realised=1)
    queue.open_window(3, chosen=1, realised=1)  # its evidence never came
    first, second = queue.close()
    assert not first.censored and second.censored
    np.testing.assert_array_equal(first.est_len, [4.0, 1.875])
    np.testing.assert_array_equal(second.gammas, [[1.0, 0.0, 0.0], [0.5, 0.0, 0.0]])
    np.testing.assert_array_equal(second.est_len, [2.0, 1.5])
    assert queue.open_windows == 0 and queue.close() == []


def test_prob_loss_uses_the_first_position_only() -> None:
    queue = FeedbackQueue(2, depth=2, loss="prob")
    queue.open_window(0, chosen=None, realised=1)
    queue.add_gammas(0, np.array([[0.25, 1.0], [0.75, 0.0]]))
    [window] = queue.pop_completed()
    np.testing.assert_allclose(window.loss, [0.75, 0.25])
    np.testing.assert_allclose(window.est_len, [1.5, 1.75])


def _simulate_request(rng: np.random.Generator, queue: FeedbackQueue, gammas: np.ndarray,
                      greedy: bool) -> tuple[list[tuple[int, np.ndarray]], int]:
    """Feed rounds of random lengths; return (start, ÂL) of popped windows, max buffer."""
    popped: list[tuple[int, np.ndarray]] = []
    position, high_water = 0, 0
    while position + queue.depth + 1 < gammas.shape[1]:
        realised = int(rng.integers(1, queue.depth + 2))
        queue.open_window(position, chosen=0, realised=realised)
        queue.add_gammas(position, gammas[:, position:position + realised])
        popped += [(w.start, w.est_len) for w in queue.pop_completed()]
        high_water = max(high_water, queue.buffered_positions)
        position += realised
    return popped, high_water


@pytest.mark.parametrize("greedy", [False, True])
def test_popped_windows_equal_the_offline_computation_and_memory_stays_bounded(
        greedy: bool) -> None:
    rng = np.random.default_rng(7)
    N, K, T = 3, 4, 3000
    gammas = (rng.random((N, T)) < 0.8).astype(float) if greedy else rng.random((N, T))
    queue = FeedbackQueue(N, K)
    popped, high_water = _simulate_request(rng, queue, gammas, greedy)
    assert len(popped) > 500
    for start, est in popped:
        np.testing.assert_allclose(est, estimate_length(gammas[:, start:start + K]))
    # After a pop only positions an open or future window may need are held: the oldest open
    # window's known prefix (< K), or what follows the last window start (<= K).
    assert high_water <= K


def test_misuse_is_rejected() -> None:
    queue = FeedbackQueue(2, depth=2)
    queue.add_gammas(0, np.ones((2, 3)))
    with pytest.raises(ValueError, match="contiguously"):
        queue.add_gammas(4, np.ones((2, 1)))
    with pytest.raises(ValueError):
        queue.add_gammas(3, np.ones((3, 1)))  # wrong number of drafters
    with pytest.raises(ValueError):
        queue.add_gammas(3, np.full((2, 1), 1.5))
    queue.open_window(1, chosen=0, realised=1)
    with pytest.raises(ValueError, match="increase"):
        queue.open_window(1, chosen=0, realised=1)
    with pytest.raises(ValueError):
        FeedbackQueue(2, depth=2, loss="throughput")
    late = FeedbackQueue(1, depth=2)
    late.open_window(0, chosen=0, realised=1)
    with pytest.raises(ValueError, match="after open window"):
        late.add_gammas(1, np.ones((1, 1)))  # γ for position 0 would never arrive
