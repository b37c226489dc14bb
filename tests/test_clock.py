"""The training clock: which optimizer's steps count the iterations."""

from __future__ import annotations

from traincheck_agent.agent.record.clock import TrainingClock


class Optimizer:
    """Stands in for an optimizer: the clock only tells them apart."""


def _steps(clock: TrainingClock, order: list[Optimizer]) -> list[int]:
    seen = []
    for optimizer in order:
        clock.optimizer_step_finished(optimizer)
        clock.advance_if_pending()
        seen.append(clock.step)
    return seen


def test_a_gan_generator_stepping_once_per_critic_steps_never_takes_the_clock():
    clock, critic, generator = TrainingClock(), Optimizer(), Optimizer()
    clock.start_training()
    order = [critic, critic, generator] * 3 + [critic, generator]
    assert _steps(clock, order) == [1, 2, 2, 3, 4, 4, 5, 6, 6, 7, 7]


def test_an_optimizer_stepping_twice_without_the_clocks_takes_it_over():
    clock, first, second = TrainingClock(), Optimizer(), Optimizer()
    clock.start_training()
    assert _steps(clock, [first, first, second, second, second]) == [1, 2, 2, 3, 4]


def test_a_gone_clock_optimizer_is_replaced_at_the_next_step():
    clock = TrainingClock()
    clock.start_training()
    first = Optimizer()
    assert _steps(clock, [first, first]) == [1, 2]
    del first
    assert _steps(clock, [Optimizer()]) == [3]  # a new object, possibly at the old address


def test_loops_without_an_optimizer_count_updates_by_hand():
    clock = TrainingClock()
    clock.start_training()
    clock.backward_finished(("v", 1))
    assert not clock.next_work_begins(("v", 1))  # accumulation: nothing was updated
    assert clock.next_work_begins(("v", 2)) and clock.advance_if_pending() and clock.step == 1
    assert clock.boundary_note()
    clock.optimizer_step_finished(Optimizer())  # an optimizer after all: it counts from now on
    assert not clock.awaits_manual_update and clock.boundary_note() == ""
