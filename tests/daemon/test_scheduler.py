"""The fair device scheduler (daemon/pyvgpu_daemon/scheduler.py): the decision logic exactly (FairShare, driven
step by step), stream-priority order within a session (pick), job tags, the load windows, and the threaded turn
(DeviceScheduler/Lane, with the worker of executor.py): waits give the turn away, devices do not serialize."""
from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter, deque

import pytest

from pyvgpu.protocol import OP_BY_NAME
from pyvgpu_daemon.executor import OrderedWorker
from pyvgpu_daemon.scheduler import (WINDOW_S, DeviceScheduler, FairShare, Share, Windows, is_work, pick,
                                     stats_key, stream_of)


# ---------------------------------------------------------------------------------------------- FairShare
def serve(fs: FairShare, lanes: dict[str, Share], cost: dict[str, float], jobs: dict[str, int],
          steps: int) -> list[str]:
    """Run `steps` jobs of always-backlogged lanes (each with `jobs` left, -1 = endless); → who ran, in order."""
    order: list[str] = []
    left = dict(jobs)
    for name, share in lanes.items():
        if left[name]:
            fs.request(share)
    by_share = {id(s): n for n, s in lanes.items()}
    for _ in range(steps):
        if fs.holder is None:
            break
        name = by_share[id(fs.holder)]
        order.append(name)
        fs.charge(fs.holder, cost[name])
        left[name] -= 1
        fs.finish(fs.holder, more=left[name] != 0)
    return order


def test_equal_weights_round_robin():
    fs = FairShare(quantum=0.0)
    lanes = {n: Share(name=n) for n in "ABC"}
    order = serve(fs, lanes, dict.fromkeys("ABC", 1.0), dict.fromkeys("ABC", -1), 12)
    assert order == list("ABCABCABCABC")


def test_weights_give_proportional_device_time():
    fs = FairShare(quantum=0.0)
    lanes = {"A": Share(weight=1.0), "B": Share(weight=2.0), "C": Share(weight=4.0)}
    order = serve(fs, lanes, dict.fromkeys("ABC", 1.0), dict.fromkeys("ABC", -1), 700)
    got = Counter(order)
    assert (got["A"], got["B"], got["C"]) == (100, 200, 400)


def test_flooder_with_long_jobs_gets_its_share_not_more():
    # F's jobs cost 10, the others' 1: in device time everyone gets the same share
    fs = FairShare(quantum=0.0)
    lanes = {n: Share() for n in "FABC"}
    cost = {"F": 10.0, "A": 1.0, "B": 1.0, "C": 1.0}
    order = serve(fs, lanes, cost, dict.fromkeys("FABC", -1), 1300)
    time_of = Counter()
    for n in order:
        time_of[n] += cost[n]
    assert time_of["F"] == pytest.approx(time_of["A"], abs=10)
    assert max(time_of[n] for n in "ABC") - min(time_of[n] for n in "ABC") <= 1.0
    # and no light lane ever waits for more than one flooder job in a row
    runs = "".join(order)
    assert "FF" not in runs


def test_idle_time_earns_no_credit():
    fs = FairShare(quantum=0.0)
    a, b = Share(name="A"), Share(name="B")
    # A alone for 100 jobs, then B arrives: B must not get 100 jobs in a row
    fs.request(a)
    for _ in range(100):
        fs.charge(a, 1.0)
        fs.finish(a, more=True)
    assert fs.holder is a
    fs.request(b)
    order = []
    for _ in range(10):
        h = fs.holder
        order.append(h.name)
        fs.charge(h, 1.0)
        fs.finish(h, more=True)
    assert order == list("ABABABABAB")


def test_returning_lane_starts_at_the_clock():
    fs = FairShare(quantum=0.0)
    a, b = Share(name="A"), Share(name="B")
    fs.request(a)
    fs.request(b)
    serve_n(fs, 20)                      # both busy
    if fs.holder is a:
        serve_n(fs, 1)
    fs.charge(b, 1.0)                    # then B runs its last job ...
    fs.finish(b, more=False)
    assert fs.holder is a
    for _ in range(50):                  # ... while A runs 50 jobs alone
        fs.charge(a, 1.0)
        fs.finish(a, more=True)
    fs.request(b)
    assert b.vtime == a.vtime            # B re-enters at A's virtual time, not 50 jobs behind it
    assert [s.name for s in serve_n(fs, 6)] == list("ABABAB")


def serve_n(fs: FairShare, n: int) -> list[Share]:
    out = []
    for _ in range(n):
        h = fs.holder
        out.append(h)
        fs.charge(h, 1.0)
        fs.finish(h, more=True)
    return out


def test_quantum_lets_the_holder_batch_small_jobs():
    fs = FairShare(quantum=5.0)
    a, b = Share(name="A"), Share(name="B")
    fs.request(a)
    fs.request(b)
    order = "".join(h.name for h in serve_n(fs, 45))
    # the holder keeps the turn until it is a quantum ahead of the waiter: runs of one quantum, then two
    # (the waiter catches up one quantum and runs one ahead), alternating; shares stay equal within a quantum
    assert order == "A" * 5 + "B" * 10 + "A" * 10 + "B" * 10 + "A" * 10
    assert abs(a.vtime - b.vtime) <= 5.0


def test_finish_without_more_frees_or_hands_over():
    fs = FairShare(quantum=0.0)
    a, b = Share(), Share()
    assert fs.request(a) is True
    assert fs.request(b) is False
    keep, nxt = fs.finish(a, more=False)
    assert (keep, nxt) == (False, b) and fs.holder is b
    keep, nxt = fs.finish(b, more=False)
    assert (keep, nxt) == (False, None) and fs.holder is None


# ---------------------------------------------------------------------------------------------- pick / tags
LAUNCH_CODE = OP_BY_NAME["LAUNCH"].code


def _job(name: str, stream: int | None, barrier: bool = False):
    """A queued job on `stream` (a LAUNCH there), or a barrier (a MALLOC)."""
    if barrier:
        return (name, (OP_BY_NAME["MALLOC"].code, [0, 64], 0))
    return (name, (LAUNCH_CODE, [0, 0x2000, [1, 1, 1], [1, 1, 1], 0, 0 if stream is None else stream], 16))


def test_pick_honours_priorities_within_barriers():
    prio = {0x1000: 0, 0x1001: -1, 0x1002: -1}.get
    q = deque([_job("low1", 0x1000), _job("low2", 0x1000), _job("hiA1", 0x1001), _job("hiB", 0x1002),
               _job("hiA2", 0x1001), _job("bar", None, barrier=True), _job("hiA3", 0x1001), _job("low3", 0x1000)])
    order = []
    while q:
        order.append(pick(q, prio)[0])
    # high-priority work first, in arrival order, each stream in its own order; nothing crosses the barrier
    assert order == ["hiA1", "hiB", "hiA2", "low1", "low2", "bar", "hiA3", "low3"]


def test_pick_default_stream_and_unknown_streams_are_barriers():
    prio = {0x1000: 0, 0x1001: -2}.get
    q = deque([_job("low", 0x1000), _job("default", None), _job("hi", 0x1001)])
    assert [pick(q, prio)[0] for _ in range(3)] == ["low", "default", "hi"]
    q = deque([_job("low", 0x1000), _job("unknown", 0x5555), _job("hi", 0x1001)])
    assert [pick(q, prio)[0] for _ in range(3)] == ["low", "unknown", "hi"]
    q = deque([("internal", None), _job("hi", 0x1001)])
    assert pick(q, prio)[0] == "internal"


def test_job_tags():
    code = lambda n: OP_BY_NAME[n].code   # noqa: E731
    grid = [1, 1, 1]
    launch = (code("LAUNCH"), [0, 0x2000, grid, grid, 0, 0x1000], 16)
    # a launch: stats per kernel, moves with its (created) stream, device work
    assert (stats_key(launch), stream_of(launch), is_work(launch[0])) == ((code("LAUNCH"), 0x2000), 0x1000, True)
    # the default stream (0, legacy 1, per-thread 2) is a barrier
    for h in (0, 1, 2):
        assert stream_of((code("MEMCPY_HTOD"), [0, 0x10, h], 4096)) is None
    assert stats_key((code("MEMCPY_HTOD"), [0, 0x10, 0x1000], 4096)) == (code("MEMCPY_HTOD"), 13)
    # ops with an event argument never move; control ops are not device work
    assert stream_of((code("EVENT_RECORD"), [0, 0x3000, 0x1000], 0)) is None
    assert stream_of((code("STREAM_WAIT_EVENT"), [0, 0x1000, 0x3000, 0], 0)) is None
    assert stream_of((code("STREAM_SYNC"), [0, 0x1000], 0)) == 0x1000 and not is_work(code("STREAM_SYNC"))
    assert not is_work(code("MALLOC")) and is_work(code("MEMSET"))
    assert is_work(449)                                  # an op this table does not know is device work
    # garbage from the wire does not crash the tagging (the handler rejects it later)
    bad = (code("LAUNCH"), [0, "x", grid, grid, 0, "y"], 0)
    assert stream_of(bad) is None and stats_key(bad) == (code("LAUNCH"), -1)
    assert stream_of((code("LAUNCH"), [0, 1, grid, grid, 0, True], 0)) is None


# ---------------------------------------------------------------------------------------------- windows
def test_windows_busy_ratio_and_split_intervals():
    t0 = 1000.0
    w = Windows(t0)
    w.add_interval(t0 + 0.5, t0 + 1.5)          # half in window 0, half in window 1
    w.add_interval(t0 + 1.75, t0 + 2.0)
    (busy,), span = w.sums(t0 + 2.0)
    assert busy == pytest.approx(1.25) and span == pytest.approx(2.0)
    (busy1,), span1 = w.sums(t0 + 2.0, last=1)   # only the current window (just started)
    assert busy1 == 0.0
    (busy1,), span1 = w.sums(t0 + 1.99, last=1)
    assert busy1 == pytest.approx(0.75) and span1 == pytest.approx(0.99)
    # 20 s later everything has left the 10 windows; reading does not modify the ring
    (busy,), _ = w.sums(t0 + 20.0)
    assert busy == 0.0
    w.add(t0 + 20.2, (3.0,))
    (busy,), _ = w.sums(t0 + 20.5)
    assert busy == 3.0 and WINDOW_S == 1.0


# ---------------------------------------------------------------------------------------------- threads
class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_lane_accounts_device_time_and_sharing_slowdown():
    clock = FakeClock()
    sched = DeviceScheduler(0, clock=clock)
    a = sched.lane(1.0, "a")
    tag = (OP_BY_NAME["LAUNCH"].code, [0, 0x2000, [1, 1, 1], [1, 1, 1], 0, 0], 16)
    # alone: 3 jobs of 2 ms each establish the kernel's alone time
    for _ in range(3):
        a.begin()
        t0 = clock.t
        clock.t += 0.002
        a.end(tag, t0, t0, clock.t)
        a.idle()
    assert a.device_seconds == pytest.approx(0.006)
    assert a.slowdown() is None and sched.slowdown(clock.t) is None
    # while another lane waits for the turn, a job counts as shared: (wait + run) / alone, summed over all jobs
    b = sched.lane(1.0, "b")
    a.begin()
    sched._share.request(b.share)        # b queues behind a (no thread needed to observe the bookkeeping)
    t0 = clock.t
    clock.t += 0.004                     # the same kernel now takes twice as long
    a._wait_s = 0.002                    # and it waited 2 ms for the turn
    assert a.end(tag, t0, t0, clock.t) is True      # b waits
    a.pass_turn(more=False)
    expected = (3 * 0.002 + 0.002 + 0.004) / (4 * 0.002)
    assert a.slowdown() == pytest.approx(expected)
    assert sched.slowdown(clock.t) == pytest.approx(expected)
    assert sched._share.holder is b.share   # finishing without more work handed the turn to b
    assert sched.busy_ratio(clock.t) > 0
    hist = a.hist[tag[0]]
    assert sum(hist[:-1]) == 4


def lane_figures(lane) -> tuple:
    return (round(lane.device_seconds, 12), {k: [round(x, 12) for x in h] for k, h in lane.hist.items()},
            {k: round(v, 12) for k, v in lane._alone.items()}, lane._sample, round(lane.observed, 12),
            round(lane.alone, 12), lane.shared_jobs, round(lane.turn_wait_seconds, 12), lane._flushed[4])


def test_end_run_accounts_as_end_does_job_by_job():
    """Lane.end_run (the loop's run of FAST ops) leaves the figures that end() gives each job of the run in turn:
    device time (less the time excluded from the first job), latency histograms, the alone-time sample (every 8th
    job, wherever a run starts in the count), the windows' flush, and the shared jobs' figures when another lane
    waits."""
    launch = OP_BY_NAME["LAUNCH"].code
    tags = [(launch, [0, 0x2000 + (i % 3), [1, 1, 1], [1, 1, 1], 0, 0], 16) if i % 2 else WORK for i in range(21)]
    runs = [(tags[:1], 0.10, 0.1000031), (tags[1:13], 0.2, 0.2000420), (tags[13:], 0.3, 0.3001),
            (tags[2:20], 0.99999, 1.00004),                 # crosses the load window's end: flushed inside the run
            (tags[:7], 1.5, 1.5002)]
    clocks = [FakeClock(), FakeClock()]
    lanes = [DeviceScheduler(0, clock=c).lane(1.0, "a") for c in clocks]
    for clock, lane in zip(clocks, lanes):
        clock.t = 0.05
        lane.flush(0.05)
    for k, (run, t0, t1) in enumerate(runs):
        for clock, lane in zip(clocks, lanes):
            clock.t = t1
            if k == 2:
                lane._excluded = 0.000002         # the first job of this run spent 2 µs in waiting()
        by_job, by_run = lanes
        step = (t1 - t0) / len(run)
        for i, tag in enumerate(run):
            by_job.end(tag, t0 + i * step, t0 + i * step, t0 + (i + 1) * step)
        by_run.end_run(run, t0, t1)
        assert lane_figures(by_run) == lane_figures(by_job), k
    assert lanes[1]._flushed[0] > 0 and lanes[1]._alone         # a flush and a sample happened
    # another lane waits for the turn: each job counts as shared, as end counts it
    for lane in lanes:
        lane.begin()
        lane.sched._share.request(lane.sched.lane(1.0, "b").share)     # b queues behind a
        lane._wait_s = 0.001
    for i in range(2):
        lanes[0].end(tags[i], 2.0 + i * 0.00035, 2.0 + i * 0.00035, 2.0 + (i + 1) * 0.00035)
    lanes[1].end_run(tags[:2], 2.0, 2.0007)
    assert lane_figures(lanes[1]) == lane_figures(lanes[0]) and lanes[1].shared_jobs == 2


def run_loop_in_thread():
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    return loop, t


def submit(loop, worker, fn, tag):
    """Submit from the loop thread (workers are driven by their loop); → concurrent future of the job."""
    async def go():
        return await worker.submit(fn, tag=tag)
    return asyncio.run_coroutine_threadsafe(go(), loop)


WORK = (OP_BY_NAME["MEMSET"].code, [0, 0x10, 0, 64, 0], 0)
CONTROL = (OP_BY_NAME["MALLOC"].code, [0, 64], 0)


def test_flooding_session_cannot_starve_another():
    """A floods 60 jobs of 5 ms; B's 6 jobs, submitted one after another, each wait for at most ~one of A's."""
    loop, thread = run_loop_in_thread()
    sched = DeviceScheduler(0, quantum=0.0)
    wa = OrderedWorker("a", loop, sched.lane(1.0, "a"))
    wb = OrderedWorker("b", loop, sched.lane(1.0, "b"))
    log: list[str] = []
    try:
        def job(name):
            def run():
                log.append(name)
                time.sleep(0.005)
            return run
        flood = [submit(loop, wa, job("A"), WORK) for _ in range(60)]
        time.sleep(0.02)
        for _ in range(6):
            log.append("b")                     # B's job submitted
            submit(loop, wb, job("B"), WORK).result(10)
        for f in flood:
            f.result(10)
        seq = "".join(log)
        # Counted from each B job's submission to its start ("b...B"), not from B's previous job: between a reply and
        # its next submission B's thread may wait for a core (on a loaded machine 4 A jobs ran there) and A's jobs
        # then rightly run. The one A job running at the submission, and one its worker began before the loop
        # thread registered B's request, at most.
        waited = [len(r) for r in re.findall(r"b(A*)B", seq)]
        assert len(waited) == 6 and max(waited) <= 2, seq
        assert 6 * 0.005 <= wb.lane.device_seconds < 1.0     # its six jobs (sleep may overshoot on a busy host)
    finally:
        for w in (wa, wb):
            w.stop()
            w.join(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def test_waits_and_control_ops_do_not_hold_the_device():
    """A job inside Lane.waiting() (a driver wait) and a control op of another session run while a session holds
    a long job; devices have independent turns."""
    loop, thread = run_loop_in_thread()
    sched = DeviceScheduler(0)
    other_dev = DeviceScheduler(1)
    wa = OrderedWorker("a", loop, sched.lane(1.0, "a"))
    wb = OrderedWorker("b", loop, sched.lane(1.0, "b"))
    wc = OrderedWorker("c", loop, other_dev.lane(1.0, "c"))
    release = threading.Event()
    try:
        def waits():
            with wa.lane.waiting():
                assert release.wait(10)
        fa = submit(loop, wa, waits, WORK)
        time.sleep(0.05)
        # b's device work runs although a's job has not finished: a gave the turn away while waiting
        submit(loop, wb, lambda: None, WORK).result(5)
        release.set()
        fa.result(5)
        assert wa.lane.device_seconds < 0.05        # the wait was not charged as device time

        # a holds the turn with a long job: b's control op and c's work on another device still run
        busy = threading.Event()
        done = threading.Event()

        def long():
            busy.set()
            assert done.wait(10)
        fa = submit(loop, wa, long, WORK)
        assert busy.wait(5)
        submit(loop, wb, lambda: None, CONTROL).result(5)
        submit(loop, wc, lambda: None, WORK).result(5)
        fb = submit(loop, wb, lambda: None, WORK)
        time.sleep(0.05)
        assert not fb.done()                        # device work of b waits for a's turn to end
        done.set()
        fa.result(5)
        fb.result(5)
    finally:
        release.set()
        for w in (wa, wb, wc):
            w.stop()
            w.join(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
