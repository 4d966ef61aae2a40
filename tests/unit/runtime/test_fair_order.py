"""The weighted fair order between models' runs (inferd.runtime.fair_order): pure
bookkeeping, driven here with a clock of our own."""

from __future__ import annotations

import heapq

import pytest

from inferd.runtime.fair_order import GRACE_S, SLICE_S, FairOrder, Member, Turn


def ask(order: FairOrder, member: Member, cores: int, now: float, background: bool = False):
    turn = order.turn(member, cores, background)
    return turn, order.ask(turn, now)


def test_a_model_alone_starts_every_run_at_once_even_beyond_the_cores() -> None:
    order = FairOrder(2)
    encoder = order.member("encoder")
    turns = [ask(order, encoder, 1, 0.0)[0] for _ in range(3)]
    assert all(t.started for t in turns)
    assert order.used == 3  # three single-threaded instances on two cores, as without the order
    solo, _ = ask(order, encoder, 2, 0.0)
    assert solo.started


def test_another_model_waits_for_room_and_then_goes_before_the_busy_one() -> None:
    order = FairOrder(2)
    gen, enc = order.member("gen"), order.member("enc")
    step, _ = ask(order, gen, 2, 0.0)
    assert step.started
    batch, _ = ask(order, enc, 1, 0.001)
    assert not batch.started  # no room beside a run on every core
    assert order.end(step, 0.001, 0.002) == []  # the slice is still the generator's
    later = SLICE_S + 0.001
    next_step, _ = ask(order, gen, 2, later)
    assert not next_step.started  # the slice is over: the waiting model goes first
    assert batch.started
    ended = later + SLICE_S / 2
    assert order.end(batch, SLICE_S / 2, ended) == []  # its slice, in its grace
    assert order.pump(ended + GRACE_S) == [next_step]


def test_the_owner_of_a_slice_keeps_the_cores_between_its_runs() -> None:
    """A generator's next step, asked a moment after its last one ended, goes before an
    encoder batch that waited meanwhile: the slice is the generator's until it ends."""
    order = FairOrder(2)
    gen, enc = order.member("gen"), order.member("enc")
    step, _ = ask(order, gen, 2, 0.0)
    batch, _ = ask(order, enc, 1, 0.0005)
    assert order.end(step, 0.001, 0.001) == []  # within the grace: the owner's next comes
    nxt, _ = ask(order, gen, 2, 0.0015)
    assert nxt.started and not batch.started
    # an idle owner's slice passes on once the grace (or the slice) is over: the order
    # says when
    assert order.end(nxt, 0.001, 0.0025) == []
    due = order.recheck_at(0.0025)
    assert due == pytest.approx(min(0.0025 + GRACE_S, SLICE_S))
    assert order.pump(due - 0.0001) == []
    assert order.pump(due) == [batch]


def test_a_waiting_turn_is_always_due_a_pump_once_the_slice_passed() -> None:
    """Asked between an idle owner's grace and the moment it is seen to pass (a pump that
    came a hair early), a waiting turn is still due a pump: never left until a run ends."""
    order = FairOrder(2)
    a, b = order.member("a"), order.member("b")
    run, _ = ask(order, a, 2, 0.0)
    order.end(run, 0.001, 0.001)
    waiting, started = ask(order, b, 2, 0.002)
    assert started == [] and not waiting.started  # a's slice, within its grace
    due = order.recheck_at(0.002)
    assert due == pytest.approx(0.001 + GRACE_S)
    assert order.pump(due - 1e-9) == []  # a pump a hair before the grace ends
    after = due + 1e-6
    assert order.recheck_at(after) == after  # the slice passed: due at once, not never
    assert order.pump(after) == [waiting]


def test_a_run_that_fits_beside_the_owner_starts_at_once() -> None:
    order = FairOrder(2)
    a, b = order.member("a"), order.member("b")
    first, _ = ask(order, a, 1, 0.0)
    beside, _ = ask(order, b, 1, 0.0)
    assert first.started and beside.started  # one core each: both run
    wide, _ = ask(order, b, 2, 0.0)
    assert not wide.started


def simulate(
    order: FairOrder, runs: dict[Member, tuple[int, float, float]], seconds: float
) -> None:
    """Each member keeps asking for runs: (cores, its run's seconds, the gap between its
    run's end and its next ask), for `seconds` of simulated time."""
    events: list[tuple[float, int, str, object]] = []  # (time, order of push, kind, what)
    count = 0

    def push(when: float, kind: str, what: object) -> None:
        nonlocal count
        count += 1
        heapq.heappush(events, (when, count, kind, what))

    def started(turns: list[Turn], now: float) -> None:
        for turn in turns:
            push(now + runs[turn.member][1], "end", turn)
        due = order.recheck_at(now)
        if due is not None:
            push(due, "pump", None)

    for member in runs:
        push(0.0, "ask", member)
    while events:
        now, _, kind, what = heapq.heappop(events)
        if now > seconds:
            break
        if kind == "ask":
            assert isinstance(what, Member)
            started(order.ask(order.turn(what, runs[what][0]), now), now)
        elif kind == "end":
            assert isinstance(what, Turn)
            started(order.end(what, runs[what.member][1], now), now)
            push(now + runs[what.member][2], "ask", what.member)
        else:
            started(order.pump(now), now)


@pytest.mark.parametrize("weights", [(1.0, 1.0), (3.0, 1.0), (1.0, 2.0)])
def test_busy_models_get_core_seconds_by_weight(weights: tuple[float, float]) -> None:
    """A generator (1 ms steps on every core, 0.3 ms of Python between them) beside an
    encoder (30 ms batches on one core, three instances): the core-seconds each gets follow
    the weights."""
    order = FairOrder(2)
    gen, enc = order.member("gen", weights[0]), order.member("enc", weights[1])
    runs = {gen: (2, 0.001, 0.0003), enc: (1, 0.03, 0.0)}
    simulate(order, runs, 30.0)
    share = gen.given_s / (gen.given_s + enc.given_s)
    assert share == pytest.approx(weights[0] / sum(weights), abs=0.05)


def test_a_cold_model_takes_the_next_slice() -> None:
    """A model idle for long joins at the busy model's virtual time (its idle time is not
    saved up, and it is not behind either): its first run waits for at most the hot model's
    slice and the run it finds running."""
    order = FairOrder(2)
    hot, cold = order.member("hot"), order.member("cold")
    now = 0.0
    for _ in range(2000):  # ten seconds of back-to-back runs
        step, _ = ask(order, hot, 2, now)
        now += 0.005
        order.end(step, 0.005, now)
    arrived = now
    step, _ = ask(order, hot, 2, now)
    first, _ = ask(order, cold, 2, now)
    assert cold.vtime == pytest.approx(hot.vtime) and hot.vtime > 9.0
    while not first.started:  # the hot model keeps asking at once
        now += 0.005
        order.end(step, 0.005, now)
        step, _ = ask(order, hot, 2, now)
    assert now - arrived <= SLICE_S + 0.005
    assert not step.started  # and it waits for the cold one's run


def test_background_runs_start_only_when_no_serving_run_waits() -> None:
    order = FairOrder(1)
    a, b = order.member("a"), order.member("b")
    step, _ = ask(order, a, 1, 0.0)
    shadow, _ = ask(order, b, 1, 0.0, background=True)
    assert shadow.started  # nothing serving waits: it takes what the serving threads leave
    waiting, _ = ask(order, b, 1, 0.0)
    later, _ = ask(order, a, 1, 0.0, background=True)
    assert not waiting.started and not later.started
    assert order.end(step, 0.01, SLICE_S) == [waiting, later]
    assert order.used == 1  # the background run holds no cores


def test_a_withdrawn_turn_lets_the_one_behind_it_start() -> None:
    order = FairOrder(2)
    a, b, c = order.member("a"), order.member("b"), order.member("c")
    running, _ = ask(order, a, 1, 0.0)
    wide, _ = ask(order, b, 2, 0.0)
    narrow, _ = ask(order, c, 1, 0.0)
    assert running.started
    assert not wide.started and not narrow.started  # behind the wide one, though it fits
    assert order.withdraw(wide, 0.001) == [narrow]
    assert not b.waiting


def test_a_weight_must_be_positive() -> None:
    with pytest.raises(ValueError, match="above 0"):
        FairOrder(2).member("m", 0.0)
