"""Which model's run takes the cores next: a weighted fair order between the models of one
process, in slices of time. Pure bookkeeping, no event loop and no clock of its own (each call
is told `now`): the gate (inferd.runtime.share) does the waiting and the timing.

The machine's `capacity` is its cores. A run holds `cores` of them while it runs (its
instance's intra-op threads). Each model has a virtual time: the core-seconds its runs took,
over its `weight` (a run is charged its model's expected cost when it starts, and the
difference once it ends).

While models wait for cores, one of them owns a slice (`SLICE_S`): its runs start as they
come, as if it were alone, and another model's run starts beside them only where it fits in
the cores the owner leaves (counting the owner as holding at least as many cores as its widest
recent run, so that a generator's next step does not find its cores taken between two steps).
When the slice ends, or its owner has had no run for `GRACE_S` (it went idle), the next slice
goes to the waiting model of least virtual time, whose runs start as the cores free (no run
jumps ahead of it: a run on every core is not starved by narrow ones). Slices, not single
runs, because a generator asks for its steps one at a time with a little Python between them:
in a run-by-run order, every gap let an encoder's 30 ms batch in ahead of its next 1 ms step.

A model that was idle joins at the least virtual time of the busy ones, so idle time is not
saved up, and a cold model's first run has the next slice. A model alone (no other waits)
starts its runs at once, as many as its instances take, beyond the capacity if they do: one
busy model runs exactly as without this order. Background runs (inferd.runtime.priority) start
only when no serving run waits; they hold no cores here (their threads take only the CPU that
serving threads leave) and are not charged.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

SLICE_S = 0.005
"""How long a model's runs go first while others wait: a few of a generator's decode steps,
about one of an encoder's batches; what a waiting model's run may wait at most, besides the
runs already running."""
GRACE_S = 0.003
"""How long a slice's owner may have no run before the slice passes on: longer than the
Python between two decode steps of a generator."""
COST_WEIGHT = 0.2
"""Weight of the newest run in a model's expected cost."""


@dataclass(eq=False, slots=True)
class Member:
    """One model's share: its weight, virtual time, runs waiting and holding cores."""

    model: str
    weight: float
    vtime: float = 0.0
    """Core-seconds given to it over its weight (charged as runs start, corrected as they end)."""
    expected_s: float = 0.0
    """A run's cost in core-seconds, as a moving average of its runs (0 before the first)."""
    waiting: deque[Turn] = field(default_factory=deque)
    holding: int = 0
    """Cores its started serving runs hold."""
    running: int = 0
    """Its serving runs started and not ended."""
    width: int = 0
    """The cores of its latest run (what its next one will want)."""
    last_end: float = float("-inf")
    given_s: float = 0.0
    """Core-seconds its runs took, in all (its statistics)."""

    @property
    def active(self) -> bool:
        return bool(self.waiting) or self.running > 0


@dataclass(eq=False, slots=True)
class Turn:
    """One run's place in the order: waiting, then started (until `end`)."""

    member: Member
    cores: int
    background: bool = False
    started: bool = False
    charged_s: float = 0.0
    """What its model was charged when it started (core-seconds over weight)."""


class FairOrder:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity is a count of cores, at least 1")
        self.capacity = capacity
        self.used = 0
        """Cores that started serving runs hold (may exceed the capacity: a model alone)."""
        self._members: dict[str, Member] = {}
        self._background: deque[Turn] = deque()
        self._owner: Member | None = None
        self._slice_ends = float("-inf")
        self._queued = 0
        """Serving turns waiting, over every model (none: the order has nothing to decide)."""

    def member(self, model: str, weight: float = 1.0) -> Member:
        """The model's share (one for all its versions); `weight` replaces its weight."""
        if not weight > 0:
            raise ValueError("a model's weight is a number above 0")
        found = self._members.get(model)
        if found is None:
            found = self._members[model] = Member(model, weight)
        found.weight = weight
        return found

    @property
    def members(self) -> list[Member]:
        return list(self._members.values())

    def turn(self, member: Member, cores: int, background: bool = False) -> Turn:
        """A run of `member` on `cores` (capped at the capacity), not yet asked for."""
        return Turn(member, min(max(cores, 1), self.capacity), background)

    def may_start(self, turn: Turn, now: float) -> bool:
        """Whether `turn` would start at once if asked for now."""
        if self._queued:
            return False
        if turn.background:
            return True
        owner = self._valid_owner(now)
        if owner is None or owner is turn.member:
            return self._fits_alone(turn.member, turn.cores)
        return self._fits_beside(owner, turn.cores)

    def ask(self, turn: Turn, now: float) -> list[Turn]:
        """Queues `turn` and starts what the order allows now: the turns started, in order
        (`turn.started` says whether it is one; if not, a later call starts it)."""
        member = turn.member
        if turn.background:
            self._background.append(turn)
        else:
            if not self._recent(member, now):  # (between two runs it is still busy)
                self._join(member)
            member.width = turn.cores
            if not self._queued and self.used == member.holding:
                # alone: nothing to order (what one busy model pays), unless another
                # model's slice lasts between its runs
                if self._owner is not member and self._valid_owner(now) is None:
                    self._owner, self._slice_ends = member, now + SLICE_S
                if self._owner is member:
                    self._start(turn)
                    return [turn]
            member.waiting.append(turn)
            self._queued += 1
        return self.pump(now)

    def end(self, turn: Turn, seconds: float, now: float) -> list[Turn]:
        """A started run ended after `seconds`: its cores freed, its model charged what it
        really cost. The turns that start now, in order."""
        if not turn.started:
            raise ValueError("only a started run ends")
        turn.started = False
        if not turn.background:
            member = turn.member
            member.running -= 1
            member.holding -= turn.cores
            member.last_end = now
            self.used -= turn.cores
            cost = seconds * turn.cores
            member.given_s += cost
            member.vtime += cost / member.weight - turn.charged_s
            member.expected_s += COST_WEIGHT * (cost - member.expected_s)
        return self.pump(now)

    def withdraw(self, turn: Turn, now: float) -> list[Turn]:
        """A waiting turn given up (its caller cancelled): the turns that start now (one
        that waited behind it may go)."""
        queue = self._background if turn.background else turn.member.waiting
        if turn in queue:
            queue.remove(turn)
            self._queued -= not turn.background
        return self.pump(now)

    def recheck_at(self, now: float) -> float | None:
        """When the order may change with no run ending: the slice of an idle owner passes
        (the gate calls `pump` then), or `now` when it has passed and turns still wait; None
        when no run waits or nothing is due."""
        if not self._queued:
            return None
        owner = self._valid_owner(now)
        if owner is None:  # the slice passed while turns wait (one pump may have just missed
            return now  # it): pump at once, or nothing would until a run ends
        if owner.active:
            return None
        return min(self._slice_ends, owner.last_end + GRACE_S)

    def pump(self, now: float) -> list[Turn]:
        """Starts the waiting turns the order allows: the slice owner's first, then others'
        that fit beside it, by virtual time; background turns when no serving one waits."""
        started: list[Turn] = []
        while self._queued:
            waiting = [m for m in self._members.values() if m.waiting]
            if not waiting:
                break
            owner = self._valid_owner(now)
            if owner is None:  # the next slice: the past owner too, if it is between runs
                past = self._owner
                candidates = waiting
                if past is not None and past not in waiting and self._recent(past, now):
                    candidates = [*waiting, past]
                owner = min(candidates, key=lambda m: m.vtime)
                self._owner, self._slice_ends = owner, now + SLICE_S
            if owner.waiting:
                head = owner.waiting[0]
                if not self._fits_alone(owner, head.cores):
                    break
                owner.waiting.popleft()
                self._queued -= 1
            else:
                first = min(waiting, key=lambda m: m.vtime)
                head = first.waiting[0]
                if not self._fits_beside(owner, head.cores):
                    break
                first.waiting.popleft()
                self._queued -= 1
            self._start(head)
            started.append(head)
        if not self._queued:
            while self._background:
                turn = self._background.popleft()
                turn.started = True
                started.append(turn)
        return started

    def _valid_owner(self, now: float) -> Member | None:
        """The slice's owner while its slice lasts and it is busy (or was, within the grace)."""
        owner = self._owner
        if owner is None or now >= self._slice_ends:
            return None
        return owner if self._recent(owner, now) else None

    @staticmethod
    def _recent(member: Member, now: float) -> bool:
        """Busy, or between two runs (its last ended within the grace)."""
        return member.active or now < member.last_end + GRACE_S

    def _fits_alone(self, member: Member, cores: int) -> bool:
        """Room for `cores` more, or no other model's run holds cores (a model alone runs
        as it would without this order)."""
        return self.used + cores <= self.capacity or self.used == member.holding

    def _fits_beside(self, owner: Member, cores: int) -> bool:
        """Room for `cores` beside the owner, counted at least as wide as its latest run."""
        held = self.used - owner.holding + max(owner.holding, owner.width)
        return held + cores <= self.capacity

    def _join(self, member: Member) -> None:
        """An idle model becomes busy: at the least virtual time of the busy ones (never
        back in its own past)."""
        busy = [m.vtime for m in self._members.values() if m.active and m is not member]
        if busy:
            member.vtime = max(member.vtime, min(busy))

    def _start(self, turn: Turn) -> None:
        turn.started = True
        member = turn.member
        member.running += 1
        member.holding += turn.cores
        self.used += turn.cores
        turn.charged_s = member.expected_s / member.weight
        member.vtime += turn.charged_s
