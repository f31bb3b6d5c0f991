"""Fair time-sharing of one device between the sessions that use it, and the load figures placement reads.

Each (session, device) keeps its own ordered worker thread (executor.py): that thread is where the session's order,
its CUDA context and its blocking driver waits live. What the threads of one device share is a *turn*: a worker runs
device work only while its `Lane` holds the device's turn, and `DeviceScheduler` hands the turn out by weighted fair
queueing (start-time fair queueing over device time):

- every lane has a virtual time `vtime`, advanced by the device time each of its jobs took divided by its weight;
- when the turn is free or its holder finishes a job while others wait, the waiting lane with the smallest vtime
  gets it (ties: the one that asked first); the holder keeps it only while its vtime is within `quantum` of theirs,
  so a session that floods the device with launches or copies gets its weighted share and no more;
- a lane that was idle re-enters no earlier than the least-served lane that has work (start-time fair queueing's
  system virtual time): idling banks no credit, so a returning session cannot monopolise the device, while a session
  that pauses only for a round trip between its batches loses nothing.

A job may also pause inside itself (`Lane.preempt`, called by the emulator between scheduler steps of a kernel):
when another lane waits for the turn and this one has run past it by more than the quantum, the time run so far is
charged, the turn is handed over, and the job continues once the turn comes back. A waiter pokes the running job
(`Lane.on_waiter`) so the pause comes within one step, and a long kernel holds the device only for its share: the
other sessions' copies and launches run between its steps, by their weights, instead of queueing behind it.

A blocking host wait on the device (stream/event/context synchronize on the real-GPU backend) is not device work:
backends wrap it in `DeviceContext.wait_scope()`, which `Lane.waiting` implements by giving the turn away for the
duration, so one session's wait never holds up another's dispatch. One scheduler per device, each with its own lock:
devices never serialize behind each other. Alone on a device a lane takes the turn with one uncontended lock and
keeps it while it has work, so the per-op cost is a few attribute updates (bench/fairness_bench.py measures it).

Device time is the wall time a job ran while holding the turn, minus the waits it gave the turn away for. The same
measurement feeds the load figures (`DeviceStats`): the busy ratio over recent 1-second windows, and the slowdown the
device's sessions saw from sharing it: over the jobs of the last windows, (time waited for the turn + run time) /
(run time alone), the alone time being a running average per kernel (per op and size class for other ops) of that
session's uncontended runs. Summed over jobs, so each job weighs by its alone time (a session that waits long for
tiny jobs does not outweigh the device's real work); reported only when some job actually ran while sharing.

`FairShare` is the pure decision logic (no threads, no clocks) so tests can check orders and weights exactly.
"""
from __future__ import annotations

import heapq
import itertools
import operator
import threading
import time
from bisect import bisect_left
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Sequence

from pyvgpu.protocol import DEFAULT_STREAM_HANDLES, OP_BY_CODE

WINDOW_S = 1.0                      # one load window
WINDOWS = 10                        # windows kept: busy ratio and slowdown are over the last 10 s
QUANTUM_S = 0.002                   # time slice: how far (device seconds / weight) a holder may run ahead of the most
                                    # deserving waiter before handing over (`--time-slice`); fewer thread hand-overs
                                    # for small jobs, at most this much extra wait for the others
ALONE_EWMA = 0.2                    # weight of a new sample in a kernel's alone-time average
ALONE_SAMPLE = 7                    # ... from every 8th uncontended job (the 1st, 9th, ...): a mask, 2^k - 1
MIN_WEIGHT, DEFAULT_WEIGHT = 0.01, 1.0
SHARED_S = 1.0                      # a device counts as shared while another session ran work there this recently
# Upper bounds (seconds) of the op latency histogram buckets; +Inf is implied.
LATENCY_BOUNDS: tuple[float, ...] = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
                                     0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


# ---------------------------------------------------------------------------------------------- the decision
@dataclass(eq=False)
class Share:
    """What FairShare knows of one lane."""
    weight: float = DEFAULT_WEIGHT
    vtime: float = 0.0
    name: str = ""


class FairShare:
    """Weighted fair queueing of one device's turn; pure bookkeeping, driven by DeviceScheduler (or a test)."""

    def __init__(self, quantum: float = QUANTUM_S) -> None:
        self.quantum = quantum
        self.holder: Share | None = None
        self.clock = 0.0                                 # the largest vtime granted or finished: where lanes
                                                         # re-enter an idle device
        self._waiting: list[tuple[float, int, Share]] = []
        self._fresh: set[Share] = set()                 # waiters that were idle before (not backlogged)
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _grant(self, share: Share) -> None:
        self._fresh.discard(share)
        self.holder = share
        if share.vtime > self.clock:
            self.clock = share.vtime

    def request(self, share: Share) -> bool:
        """`share` wants the turn: True when it got it now, False when it waits (it is granted by finish())."""
        if self.holder is None and not self._waiting:
            floor = self.clock
        else:                                            # the least-served lane with work: the system virtual time
            floor = min(self.holder.vtime if self.holder is not None else float("inf"),
                        self._waiting[0][0] if self._waiting else float("inf"))
        if share.vtime < floor:
            share.vtime = floor                          # idle time earns no credit
        if self.holder is None and not self._waiting:
            self._grant(share)
            return True
        heapq.heappush(self._waiting, (share.vtime, next(self._seq), share))
        self._fresh.add(share)
        return False

    def charge(self, share: Share, cost: float) -> None:
        share.vtime += cost / share.weight

    def slack(self, mid_job: bool) -> float:
        """How far the holder may run ahead of the best waiter before handing over: the quantum, except inside a
        job (a paused kernel resumes where it stopped, so nothing is batched by running on) for a waiter that was
        idle before: a session that comes back with a little work is served at once (its time is charged to it,
        so it gets no more than its share), while two backlogged sessions still alternate by the quantum."""
        if mid_job and self._waiting and self._waiting[0][2] in self._fresh:
            return 0.0
        return self.quantum

    def finish(self, share: Share, more: bool, mid_job: bool = False) -> tuple[bool, Share | None]:
        """The holder finished a job (already charged), or paused inside one (`mid_job`). → (it keeps the turn, the
        lane granted instead or None).

        With `more` the holder has further work: it keeps the turn unless a waiter is more deserving by more than
        the slack, in which case it queues behind. Without `more` the turn goes to the best waiter, or is free."""
        assert self.holder is share
        if share.vtime > self.clock:
            self.clock = share.vtime
        if self._waiting:
            if more and share.vtime < self._waiting[0][0] + self.slack(mid_job):
                return True, None
            _, _, nxt = heapq.heappop(self._waiting)
            self._grant(nxt)
            if more:
                heapq.heappush(self._waiting, (share.vtime, next(self._seq), share))
            return False, nxt
        if more:
            return True, None
        self.holder = None
        return False, None


# ---------------------------------------------------------------------------------------------- load figures
class Windows:
    """Sums over the last WINDOWS windows of WINDOW_S seconds (a ring). One writer (the lane holding the turn);
    readers (status) never modify it."""

    def __init__(self, now: float, slots: int = 1) -> None:
        self.slots = slots
        self._ring = [[0.0] * slots for _ in range(WINDOWS)]
        self._cur = int(now // WINDOW_S)
        self.started = now

    def _advance(self, idx: int) -> None:
        if idx <= self._cur:
            return
        for i in range(self._cur + 1, min(idx, self._cur + WINDOWS) + 1):
            row = self._ring[i % WINDOWS]
            for k in range(self.slots):
                row[k] = 0.0
        self._cur = idx

    def add(self, t: float, values: tuple[float, ...]) -> None:
        idx = int(t // WINDOW_S)
        self._advance(idx)
        if idx > self._cur - WINDOWS:
            row = self._ring[idx % WINDOWS]
            for k, v in enumerate(values):
                row[k] += v

    def add_interval(self, t0: float, t1: float) -> None:
        """Slot 0 += the part of [t0, t1] that falls in each window (busy time)."""
        idx = int(t1 // WINDOW_S)
        self._advance(idx)
        if t0 >= idx * WINDOW_S:                       # the usual case: inside the current window
            self._ring[idx % WINDOWS][0] += t1 - t0
            return
        lo = max(t0, (self._cur - WINDOWS + 1) * WINDOW_S)
        while lo < t1:
            i = int(lo // WINDOW_S)
            hi = min(t1, (i + 1) * WINDOW_S)
            self._ring[i % WINDOWS][0] += hi - lo
            lo = hi

    def sums(self, now: float, last: int = WINDOWS) -> tuple[list[float], float]:
        """(per-slot sums over the last `last` windows, the current one included; the seconds they cover)."""
        cur_now = int(now // WINDOW_S)
        cur = self._cur
        out = [0.0] * self.slots
        for i in range(cur_now - last + 1, cur_now + 1):
            if cur - WINDOWS < i <= cur:
                row = self._ring[i % WINDOWS]
                for k in range(self.slots):
                    out[k] += row[k]
        span = min(now - (cur_now - last + 1) * WINDOW_S, now - self.started)
        return out, max(span, 1e-9)


class DeviceStats:
    """Per device: busy time and the sharing slowdown over recent windows, totals since the daemon started."""

    def __init__(self, now: float) -> None:
        self.busy = Windows(now)
        self.shared = Windows(now, 3)       # (observed, alone) seconds of every job, jobs run while sharing
        self.device_seconds = 0.0           # every session's, since the daemon started
        self.retired_ops: dict[int, list[float]] = {}      # latency histograms of ended sessions



# ---------------------------------------------------------------------------------------------- threads
class DeviceScheduler:
    """The turn of one device, shared by the lanes of the sessions using it (thread-safe).

    fair=False (`--scheduling off`): no arbitration, every lane runs when its worker does (the daemon before this
    scheduler); the figures are still kept, under the lock since several lanes then write them at once."""

    def __init__(self, ordinal: int, fair: bool = True, quantum: float = QUANTUM_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.ordinal = ordinal
        self.fair = fair
        self.clock = clock
        self._lock = threading.Lock()
        self._share = FairShare(quantum)
        self.stats = DeviceStats(clock())
        self.lanes: set[Lane] = set()       # live lanes, for status; changed under _lock

    @property
    def contended(self) -> bool:
        """Another lane waits for the turn (read without the lock: a hint, exact enough for a decision per job)."""
        return bool(self._share._waiting)

    def lane(self, weight: float = DEFAULT_WEIGHT, name: str = "") -> Lane:
        lane = Lane(self, max(MIN_WEIGHT, float(weight)), name)
        with self._lock:
            self.lanes.add(lane)
        return lane

    def retire(self, lane: Lane) -> None:
        """A session ended (its worker has stopped): its latency counts stay in the device's (monotonic)."""
        lane.flush(self.clock())
        with self._lock:
            self.lanes.discard(lane)
            for op, counts in lane.hist.items():
                mine = self.stats.retired_ops.setdefault(op, [0.0] * len(counts))
                for i, v in enumerate(counts):
                    mine[i] += v

    def live_lanes(self) -> list[Lane]:
        with self._lock:
            return list(self.lanes)

    # -- figures: the windows plus what live lanes have not flushed yet (at most their current window)
    def _pending(self) -> list[float]:
        out = [0.0, 0.0, 0.0, 0.0]
        with self._lock:
            for lane in self.lanes:
                for i, v in enumerate(lane.pending()):
                    out[i] += v
        return out

    def busy_ratio(self, now: float, last: int = WINDOWS) -> float:
        (busy,), span = self.stats.busy.sums(now, last)
        return min(1.0, (busy + self._pending()[0]) / span)

    def slowdown(self, now: float) -> float | None:
        """(waits + run times) / alone times of the device's jobs in the last windows; None when no job there ran
        while another session was active (nothing was shared)."""
        (obs, alone, shared), _ = self.stats.shared.sums(now)
        pend = self._pending()
        obs, alone, shared = obs + pend[1], alone + pend[2], shared + pend[3]
        return obs / alone if alone > 0 and shared else None

    def device_seconds(self) -> float:
        return self.stats.device_seconds + self._pending()[0]

    # -- turn taking (called by a lane's worker thread)
    def _acquire(self, lane: Lane) -> bool:
        """Block until `lane` holds the turn. → whether it had to wait for another lane."""
        with self._lock:
            if self._share.request(lane.share):
                return False
            lane._wake.clear()
            holder = self._share.holder
            poke = holder.lane._poke if holder is not None else None
            if poke is not None:
                poke()                      # the holder's running job checks whether to pause at its next step
        lane._wake.wait()
        return True

    def _finish(self, lane: Lane, more: bool, mid_job: bool = False) -> tuple[bool, bool]:
        """The holder is done with a job (or pauses inside one). → (it holds the turn now, it had to wait for other
        lanes to get it)."""
        with self._lock:
            keep, nxt = self._share.finish(lane.share, more, mid_job)
            if nxt is not None:
                nxt.lane._wake.set()
            if keep or not more:
                return keep, False
            lane._wake.clear()
        lane._wake.wait()
        return True, True


class _LaneShare:
    """A lane as FairShare sees it. Its virtual time is derived from the lane's device time, so the per-job path
    never touches it: vtime = offset + device_seconds / weight (raising it to a floor moves the offset)."""

    __slots__ = ("weight", "name", "lane", "_offset")

    def __init__(self, weight: float, name: str, lane: "Lane") -> None:
        self.weight, self.name, self.lane, self._offset = weight, name, lane, 0.0

    @property
    def vtime(self) -> float:
        return self._offset + self.lane.device_seconds / self.weight

    @vtime.setter
    def vtime(self, value: float) -> None:
        self._offset = value - self.lane.device_seconds / self.weight


class Lane:
    """One session's use of one device: its turn taking and its figures. Driven by one worker thread; other
    threads only read the figures (floats and ints, consistent enough under the GIL for status).

    The per-job path (end) is the scheduler's whole cost to a session alone, so an uncontended job only adds its
    device time and its latency; virtual time derives from device time, alone times are learnt from a sample of
    jobs, and the device's windows receive the figures once per window (flush)."""

    def __init__(self, sched: DeviceScheduler, weight: float, name: str) -> None:
        self.sched = sched
        self.device_seconds = 0.0
        self.share = _LaneShare(weight, name, self)
        self.holding = False
        self._wake = threading.Event()
        self._excluded = 0.0                # seconds of the current job spent in waiting()
        self._wait_s = -1.0                 # how long the next job waited for the turn (-1: it did not wait)
        self.turn_wait_seconds = 0.0        # time spent waiting for other sessions' work
        self.shared_jobs = 0                # jobs run while another session was active
        self.shared_seconds = 0.0           # their device time
        self.shared_alone = 0.0             # their alone times
        self.observed = 0.0                 # flushed: waited for the turn + ran, every job (seconds)
        self.alone = 0.0                    # flushed: the same jobs' alone times (seconds)
        self.last_active = 0.0
        self.hist: dict[int, list[float]] = {}   # op code -> counts per latency bucket (+Inf last), then the sum
        self._alone: dict[Hashable, float] = {}  # stats key -> running average of its uncontended run time
        self._sample = 0
        self._flushed = (0.0, 0.0, 0.0, 0.0, 0)  # device_seconds, waits, shared seconds, shared alone, jobs then
        self._flush_at = 0.0
        self.job_t0 = 0.0                   # when the running job started (set by the worker for device work)
        self._charged = 0.0                 # device seconds of the running job charged already (preempt)
        self._preempt_lock = threading.Lock()   # a job's threads (the emulator's chunk pool) pause one at a time
        self._poke: Callable[[], None] | None = None
        self._shared_hint = False           # caches of `shared` and `others_outside`, until _hint_until
        self._outside_hint = False
        self._hint_until = 0.0

    @property
    def weight(self) -> float:
        return self.share.weight

    @property
    def jobs(self) -> int:
        """Device work jobs run (from the latency histograms)."""
        return int(sum(sum(h[:-1]) for op, h in list(self.hist.items()) if is_work(op)))

    # -- around each job (worker thread)
    def begin(self) -> None:
        """Hold the device's turn before running a job."""
        if self.holding:
            return
        sched = self.sched
        if sched.fair:
            t = sched.clock()
            if sched._acquire(self):
                self._wait_s = sched.clock() - t
            self.last_active = t
        self.holding = True

    def end(self, tag: Tag | None, submitted: float, t0: float, t1: float) -> bool:
        """Account a job that ran from t0 to t1 (submitted at `submitted`; tag None: an internal job). → whether
        another lane waits for the turn: the worker then calls pass_turn(); idle() when it has no more work."""
        cost = t1 - t0
        if self._excluded:
            cost = max(0.0, cost - self._excluded)
            self._excluded = 0.0
        if t1 >= self._flush_at:
            self.flush(t1)
        if self._charged:                   # part of it was charged when the job paused (preempt)
            self.device_seconds += max(0.0, cost - self._charged)
            self._charged = 0.0
        else:
            self.device_seconds += cost
        waiting = self.sched._share._waiting
        if tag is None:
            return bool(waiting)
        self.record(tag, submitted, t1)
        if self._wait_s >= 0.0 or waiting:
            self._shared(stats_key(tag), cost)
            return bool(waiting)
        self._sample += 1
        if self._sample & ALONE_SAMPLE == 1:        # learn what this kind of job takes alone, from a sample
            key = stats_key(tag)
            alone = self._alone.get(key)
            self._alone[key] = cost if alone is None else alone + ALONE_EWMA * (cost - alone)
        return False

    def end_run(self, tags: Sequence[Tag], t0: float, t1: float) -> None:
        """Account a run of jobs that ran back to back from t0 to t1, their time split evenly (the loop running a
        run of FAST ops, fastpath.run_group_on_loop): the figures `end(tag_i, a_i, a_i, a_i + step)` gives for each
        in turn, with a_i = t0 + i * step, made once per run. Where another session waits or this lane waited for
        its turn (each job then counts as shared), job by job through end itself."""
        n = len(tags)
        if not n:
            return
        step = (t1 - t0) / n
        if self._wait_s >= 0.0 or self.sched._share._waiting or self._charged or t1 >= self._flush_at:
            for i, tag in enumerate(tags):    # rare: once a window (a flush falls inside the run), or contended
                a = t0 + i * step
                self.end(tag, a, a, a + step)
            return
        first = step
        if self._excluded:                  # end deducts it from the first job only
            first = max(0.0, step - self._excluded)
            self._excluded = 0.0
        self.device_seconds += first + step * (n - 1)
        self.record_run(tags, t0, t0 + step)          # every job's latency is `step`
        # the alone times' sample: the jobs end would sample (counter & ALONE_SAMPLE == 1 after its increment)
        s0 = self._sample
        self._sample = s0 + n
        for i in range(-s0 % (ALONE_SAMPLE + 1), n, ALONE_SAMPLE + 1):
            key = stats_key(tags[i])
            cost = first if i == 0 else step
            alone = self._alone.get(key)
            self._alone[key] = cost if alone is None else alone + ALONE_EWMA * (cost - alone)

    def _shared(self, key: Hashable, cost: float) -> None:
        """A job run while another session was active: (wait + run) against its alone time (its own run time
        when its alone time is not known yet). Uncontended jobs count with observed = alone = their run time, so
        the device's figure is device-time weighted: a session waiting long for tiny jobs does not outweigh the
        device's real work."""
        wait = max(self._wait_s, 0.0)
        self._wait_s = -1.0
        alone = self._alone.get(key)
        self.turn_wait_seconds += wait
        self.shared_jobs += 1
        self.shared_seconds += cost
        self.shared_alone += alone if alone is not None else cost

    def pending(self) -> tuple[float, float, float, float]:
        """Figures since the last flush: (busy seconds, observed seconds, alone seconds, shared jobs)."""
        d0, w0, s0, a0, n0 = self._flushed
        busy = self.device_seconds - d0
        shared_alone = self.shared_alone - a0
        alone = busy - (self.shared_seconds - s0) + shared_alone
        return busy, busy + self.turn_wait_seconds - w0, alone, float(self.shared_jobs - n0)

    def flush(self, now: float) -> None:
        """Move this lane's figures since the last flush into its device's windows (once per window, at the end)."""
        stats = self.sched.stats
        when = min(now, self._flush_at - 1e-9) if self._flush_at else now
        with self.sched._lock:
            busy, observed, alone, shared = self.pending()
            stats.device_seconds += busy
            if busy:
                stats.busy.add(when, (busy,))
                stats.shared.add(when, (observed, alone, shared))
                self.last_active = max(self.last_active, when)
            self.observed += observed
            self.alone += alone
            self._flushed = (self.device_seconds, self.turn_wait_seconds, self.shared_seconds, self.shared_alone,
                             self.shared_jobs)
        self._flush_at = (int(now // WINDOW_S) + 1) * WINDOW_S

    def pass_turn(self, more: bool) -> None:
        """Others wait: keep the turn only if this lane is still the most deserving (within the time slice), else
        hand it over and, with `more` work queued, wait to get it back."""
        sched = self.sched
        t = sched.clock()
        self.holding, waited = sched._finish(self, more)
        if waited:
            self._wait_s = sched.clock() - t

    def record(self, tag: Tag, submitted: float, t1: float) -> None:
        """A job's latency, from its submission to its end, into its op's histogram."""
        h = self.hist.get(tag[0])
        if h is None:
            h = self.hist[tag[0]] = [0.0] * (len(LATENCY_BOUNDS) + 2)
        lat = t1 - submitted
        h[bisect_left(LATENCY_BOUNDS, lat)] += 1
        h[-1] += lat

    def record_run(self, tags: Sequence[Tag], submitted: float, t1: float) -> None:
        """record(tag, submitted, t1) for each of tags: jobs of one latency, its bucket found once."""
        lat = t1 - submitted
        bucket = bisect_left(LATENCY_BOUNDS, lat)
        hist = self.hist
        for code, n in Counter(map(_CODE, tags)).items():     # counted in C: a run has a few distinct ops
            h = hist.get(code)
            if h is None:
                h = hist[code] = [0.0] * (len(LATENCY_BOUNDS) + 2)
            h[bucket] += n
            h[-1] += lat * n

    def idle(self) -> None:
        """No queued work: give the turn back."""
        if self.holding:
            self.holding = False
            if self.sched.fair:
                self.sched._finish(self, False)

    def preempt(self) -> float | None:
        """backends.base.DeviceTurn.preempt: called from the running job's threads (the worker thread or the
        emulator's chunk pool) between steps of a long kernel."""
        sched = self.sched
        if not sched.fair or not self.holding or not sched._share._waiting:
            return None
        with self._preempt_lock:
            now = sched.clock()
            ran = now - self.job_t0 - self._excluded - self._charged
            if ran > 0:
                self.device_seconds += ran          # charge what ran so far: the decision is on device time
                self._charged += ran
            self.holding, waited = sched._finish(self, True, mid_job=True)
            if waited:
                paused = sched.clock() - now
                self._excluded += paused            # not device time of this job
                self._wait_s = max(self._wait_s, 0.0) + paused
            with sched._lock:
                share = sched._share
                if not share._waiting:
                    return None
                ahead = share._waiting[0][0] + share.slack(True) - self.share.vtime
            return max(0.0, ahead * self.share.weight)

    def on_waiter(self, poke: Callable[[], None] | None) -> None:
        """backends.base.DeviceTurn.on_waiter: the running job's poke, or None once it ended."""
        self._poke = poke

    @property
    def shared(self) -> bool:
        """backends.base.DeviceTurn.shared: another session ran device work here within the last SHARED_S."""
        self._hints()
        return self._shared_hint

    @property
    def others_outside(self) -> bool:
        """backends.base.DeviceTurn.others_outside: another session that was active within SHARED_S is not waiting
        for the turn now, so its requests are being handled by threads that need the GIL (the loop, its worker)."""
        self._hints()
        return self._outside_hint

    def _hints(self) -> None:
        """Recompute `shared` and `others_outside`, at most every 10 ms (read without the lock: hints, as
        `contended`; list() copies the set in one C call, safe against another thread adding a lane)."""
        sched = self.sched
        now = sched.clock()
        if now < self._hint_until:
            return
        self._hint_until = now + 0.01
        if not sched.fair:
            self._shared_hint = self._outside_hint = False
            return
        active = [lane for lane in list(sched.lanes)
                  if lane is not self and (lane.holding or lane.last_active > now - SHARED_S)]
        waiting = {entry[2] for entry in list(sched._share._waiting)}
        self._shared_hint = bool(active)
        self._outside_hint = any(lane.share not in waiting for lane in active)

    def charge(self, seconds: float) -> None:
        """backends.base.DeviceTurn.charge: device time of work that ran after its job ended (worker thread)."""
        self.device_seconds += seconds

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """A host wait on the device inside a job: other sessions may run meanwhile; not charged as device time."""
        sched = self.sched
        t = sched.clock()
        give_back = self.holding and sched.fair
        if give_back:
            self.holding = False
            sched._finish(self, False)
        try:
            yield
        finally:
            if give_back:
                sched._acquire(self)
                self.holding = True
            self._excluded += sched.clock() - t

    # -- figures
    def slowdown(self) -> float | None:
        """Over the session's life: (waits + run times) / alone times; None until it shared the device."""
        _, observed, alone, _ = self.pending()
        observed, alone = self.observed + observed, self.alone + alone
        return observed / alone if alone > 0 and self.shared_jobs else None


# ---------------------------------------------------------------------------------------------- stream priorities
# Job tags: (op code, request args as received, payload length), built on the loop at no cost; what the worker
# needs from them is derived there, when needed:
# - is_work(code): the op occupies the device (copies, memsets, launches, library calls: OpSpec.work), so it runs
#   only in the session's turn and counts as device time; ops whose spec line says OpFlag.HOST (allocation, handles,
#   queries, host waits) run whenever the session's order reaches them, so a session is never held up by another's
#   long kernel just to allocate or to wait for its own work;
# - stream_of(tag): the wire handle of a created stream when the job is stream-ordered work that may move with its
#   stream (OpSpec.ordered_on: a stream argument and no event argument; the handle is not a default-stream
#   sentinel), else None: a barrier nothing crosses;
# - stats_key(tag): per kernel for ops on a function (OpSpec.func_arg), else per op and payload size class.
Tag = tuple[int, Any, int]
_CODE = operator.itemgetter(0)        # a Tag's op code
LOOKAHEAD = 256


def is_work(code: int) -> bool:
    spec = OP_BY_CODE.get(code)
    return spec is None or spec.work


def stats_key(tag: Tag) -> Hashable:
    code, args, payload_len = tag
    spec = OP_BY_CODE.get(code)
    fi = spec.func_arg if spec is not None else None
    if fi is None:
        return code, payload_len.bit_length()
    f = args[fi]
    return code, f if type(f) is int else -1


def stream_of(tag: Tag) -> int | None:
    code, args, _ = tag
    spec = OP_BY_CODE.get(code)
    si = spec.ordered_on if spec is not None else None
    if si is None:
        return None
    h = args[si]
    return h if type(h) is int and h not in DEFAULT_STREAM_HANDLES else None   # type(): not bool, not garbage


def pick(pending: deque, priority_of: Callable[[int], int | None]) -> Any:
    """Remove and return the next job of one session's queue, honouring stream priorities.

    Items are (..., tag) tuples whose last element is a Tag (or None for internal jobs). The head runs first unless
    it is stream work and, before the first barrier, work of a stream with a better (lower) CUDA priority is queued:
    then the earliest job of the best priority runs. Jobs of one stream keep their order (they share a priority and
    the earliest is taken); nothing moves across a barrier (default-stream work, events, allocations, syncs of the
    whole device), so CUDA's ordering rules hold."""
    head = pending[0]
    stream = stream_of(head[-1]) if head[-1] is not None else None
    if stream is None:
        return pending.popleft()
    best_i, best_p = 0, priority_of(stream)
    if best_p is None:
        return pending.popleft()
    for i in range(1, min(len(pending), LOOKAHEAD)):
        t = pending[i][-1]
        stream = stream_of(t) if t is not None else None
        if stream is None:
            break
        p = priority_of(stream)
        if p is None:
            break
        if p < best_p:
            best_i, best_p = i, p
    if best_i == 0:
        return pending.popleft()
    item = pending[best_i]
    del pending[best_i]
    return item


@dataclass
class SchedulerConfig:
    fair: bool = True
    max_weight: float = 10.0
    quantum: float = QUANTUM_S


@dataclass
class Schedulers:
    """The daemon's schedulers, one per device."""
    ndevices: int
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    devices: list[DeviceScheduler] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.devices = [DeviceScheduler(r, self.config.fair, self.config.quantum) for r in range(self.ndevices)]

    def clamp_weight(self, weight: float) -> float:
        return min(max(weight, MIN_WEIGHT), self.config.max_weight)
