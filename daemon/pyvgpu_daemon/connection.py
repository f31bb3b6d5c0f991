"""Connection: one session's frame loop, on the event loop thread.

The loop only parses frames, validates their shape and carries out one route decision per frame: a NO_DEVICE op goes
to its @control handler (handlers/control.py); a device op on a device the session may not use is answered at once;
every other device op is routed by fastpath.route, once, before its payload is read (the worker, the loop, a payload
landing in device memory, a reply sent from device memory). Replies are written when the worker's result comes back.
The waits of flow control are the Link's (link.py). A frame that breaks the protocol raises (SessionEnd,
wire.ProtocolError) and the session's lifecycle (lifecycle.py) ends it with a one-line reason; nothing a client sends
can stop the daemon or touch other sessions.

Two ways in, one path: `serve` reads frames (awaiting what is not there yet, and the flow-control waits); `step_now`
handles a frame that is complete in the buffer and needs no wait, also straight from the transport's data callback
(`frames_now`, one loop iteration less per small request).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from pyvgpu import wire
from pyvgpu.protocol import (ERR_UNAVAILABLE, ERROR_CODES, FRAME_PREFIX_BYTES, NOTICE_RATE, OP_BY_CODE, RATE_REPORT_CHANGE,
                             RATE_SAMPLE_MIN_BYTES, OpSpec)
from pyvgpu_daemon import compress, fastpath, fastrun, lent
from pyvgpu_daemon.errors import SessionEnd
from pyvgpu_daemon.fastpath import Route
from pyvgpu_daemon.framepath import FramePath
from pyvgpu_daemon.handlers import dispatch
from pyvgpu_daemon.handlers.control import CONTROL
from pyvgpu_daemon.link import Link, reply_bytes
from pyvgpu_daemon.session import DeviceState
from pyvgpu_daemon.stream import FrameStream

if TYPE_CHECKING:
    from pyvgpu_daemon.server import Server

log = logging.getLogger("pyvgpu.daemon")

ERR_INVALID_DEVICE = ERROR_CODES["cudaErrorInvalidDevice"]


class Connection:
    """One established session's frames: read, checked, routed, answered."""

    def __init__(self, server: Server, link: Link) -> None:
        self.server = server
        self.link = link
        self.backend = server.backend
        self.max_payload = server.payload_cap
        self.framepath = server.framepath
        # the compiled path takes payloads that step_now would (below DIRECT_MIN) and check_shape allows
        self.run_payload_max = min(FrameStream.DIRECT_MIN, self.max_payload + 1)

    # ------------------------------------------------------------------ reading frames
    async def serve(self) -> str:
        """Frames until the client closes (→ the reason the session ends); errors raise."""
        link = self.link
        b = link.bounds
        stream = link.stream
        stream.on_data = self.frames_now
        while True:
            if self.step_now():
                continue
            # The per-frame path for what step_now leaves: waits (flow control, payloads still to come), frames
            # without a device, errors. Checks that usually pass are made inline and only their waits are awaited.
            if not link.replies_fit(0):
                await link.wait_replies_read(0)
            got = stream.header_now()
            if got is None:
                got = await stream.read_header(b.idle_timeout_s, b.frame_timeout_s)
                if got is None:
                    return "client closed the connection"
            header, hsize = got
            req = wire.parse_request(header)
            spec = OP_BY_CODE.get(req.op)
            if spec is None:
                raise SessionEnd(f"unknown op {req.op}")
            self.check_shape(spec, req, link.session.codecs)
            if link.sending_device_memory:
                await link.wait_sent()
            if not spec.device:
                ended = CONTROL[spec.code](self.server, link, req)
                if ended is not None:
                    return ended
                continue
            plen = req.payload_len
            nbytes = hsize + req.size               # a compressed payload counts as decoded
            need = reply_bytes(spec, req.args)
            if not link.room(nbytes):
                await link.admit(nbytes)
            if not link.replies_fit(need):
                await link.wait_replies_read(need)
            st = self.device_of(spec, req)
            path, view = (fastpath.route(link.session, st, spec, req.args, plen, bool(req.codec), req.req_id,
                                         link.oversize) if st is not None else (None, None))
            if path is Route.LAND:
                assert st is not None and view is not None
                await self.land(st, spec, req, view)
                continue
            payload: Any = stream.payload_now(plen) if plen else b""
            if payload is None:
                t0, early = time.perf_counter(), stream.arrived() if plen >= RATE_SAMPLE_MIN_BYTES else 0
                payload = await stream.read_payload(plen, b.payload_deadline_s(plen))
                if plen >= RATE_SAMPLE_MIN_BYTES:
                    self.rate_sample(plen - early, time.perf_counter() - t0)
            if st is None:
                link.release_oversize()       # refused (answered by device_of): its payload is read and dropped
                continue
            if req.codec:
                compress.check_blocks(payload, req.raw_len, req.codec)
                payload = compress.Compressed(req.codec, req.raw_len, payload)
            assert path is not None
            self.run(path, st, spec, req, payload, nbytes, need, view)

    def step_now(self) -> bool:
        """Handle the next frame at once when it is complete in the buffer and needs no wait: a device op whose
        payload (if any) is small and buffered, with room in the session's queue and no reply bytes owed. → True
        when handled; False leaves the stream untouched for serve's general path (which also raises the errors)."""
        link = self.link
        stream = link.stream
        if link.sending_device_memory:
            return False
        # fire-and-forget runs owe no reply: they wait only where serve would make them wait (replies_fit(0))
        if self.framepath is not None and not link.oversize and link.replies_fit(0) and self.step_run(self.framepath):
            return True
        if link.reply_owed or stream.write_buffer_size():
            return False
        got = stream.peek_header()
        if got is None:
            return False
        header, hsize = got
        req = wire.parse_request(header)
        spec = OP_BY_CODE.get(req.op)
        if spec is None or not spec.device or req.codec:
            return False                  # a compressed payload takes serve's path (decoded size, Compressed)
        self.check_shape(spec, req, link.session.codecs)
        plen = req.payload_len
        nbytes = hsize + plen
        if plen >= FrameStream.DIRECT_MIN or not stream.buffered(nbytes) or not link.room(nbytes):
            return False
        need = reply_bytes(spec, req.args)          # fits: nothing else is owed
        stream.skip(hsize)
        payload = stream.payload_now(plen) if plen else b""
        st = self.device_of(spec, req)
        if st is not None:
            path, view = fastpath.route(link.session, st, spec, req.args, plen, False, req.req_id, link.oversize)
            self.run(path, st, spec, req, payload, nbytes, need, view)
        return True

    def step_run(self, fp: FramePath) -> bool:
        """The compiled path (framepath.py): the run of FAST frames at the head of the buffer, decoded in one call,
        consumed, and run device by device (fastrun.py). False when the first frame is not one, or when the run
        does not fit the session's queue: the frames then take the Python path one by one (which waits)."""
        link = self.link
        stream = link.stream
        buf, lo, hi = stream.window()
        if hi - lo < FRAME_PREFIX_BYTES:
            return False
        ops = fp.scan(buf, lo, hi, self.run_payload_max)
        if not ops or not link.room(ops[-1][4]):
            return False
        fp.frames += len(ops)
        fp.runs += 1
        groups: list[tuple[list[fastrun.RunOp], list[int]]] = []
        start = 0
        dev = None
        for spec, args, off, plen, end in ops:
            if args[0] != dev:            # another device: another group
                dev = args[0]
                group: list[fastrun.RunOp] = []
                sizes: list[int] = []
                groups.append((group, sizes))
            group.append((spec, args, bytes(buf[lo + off:lo + off + plen]) if plen else b""))
            sizes.append(end - start)
            start = end
        stream.skip(start)                # consumed before anything runs: no frame is ever taken twice
        for group, sizes in groups:
            self.run_group(group, sizes)
        return True

    def run_group(self, group: list[fastrun.RunOp], sizes: list[int]) -> None:
        """Consecutive FAST ops of one device (frames of `sizes` bytes): on the loop when fastpath allows every one
        of them, else as one job of the device's worker when fastpath.groups_on_worker allows it, else one job
        per op."""
        spec, args, payload = group[0]
        st = self.device_of(spec, wire.Request(spec.code, 0, len(payload), args))
        if st is None:                    # refused: each op as the Python path refuses it (logged, dropped)
            for spec, args, payload in group[1:]:
                self.device_of(spec, wire.Request(spec.code, 0, len(payload), args))
            return
        nbytes = sum(sizes)
        session, backend, worker = self.link.session, self.backend, st.worker
        if fastpath.run_group_on_loop(session, st, backend, group, nbytes):
            return
        if len(group) > 1 and fastpath.groups_on_worker(st, group):
            worker.post(fastrun.execute_job, session, st, backend, group, time.perf_counter(), nbytes=nbytes,
                        tag=fastrun.group_tag(group, nbytes))
            return
        for (spec, args, payload), size in zip(group, sizes):     # one job per op, as the Python path posts them
            worker.post(dispatch.execute, session, st, backend, spec, args, payload, True, nbytes=size,
                        tag=(spec.code, args, len(payload)))

    def frames_now(self) -> None:
        """FrameStream.on_data: bytes arrived while the session waited for a frame; handle what step_now can right
        in the transport's callback (no wake-up of serve). Anything else, errors included, is left to serve."""
        handled = False
        try:
            while self.step_now():
                handled = True
        except (wire.ProtocolError, SessionEnd):
            pass                          # raised before the frame was consumed: serve meets it and ends the session
        except Exception:  # noqa: BLE001 - a callback of the transport must not raise
            log.exception("%s: handling a frame failed", self.link.session.tag())
        if handled:
            self.link.stream.handled_at = self.link.stream.event_loop().time()

    def check_shape(self, spec: OpSpec, req: wire.Request, codecs: tuple[int, ...] = ()) -> None:
        if len(req.args) != len(spec.args):
            raise SessionEnd(f"{spec.name} with {len(req.args)} args, spec has {len(spec.args)}")
        if req.payload_len and not spec.payload_in:
            raise SessionEnd(f"{spec.name} carries a {req.payload_len}-byte payload it does not take")
        if req.size > self.max_payload:
            raise SessionEnd(f"{spec.name} payload of {req.size} bytes exceeds device memory")
        if req.codec and (req.codec not in codecs or not spec.compressible):
            raise SessionEnd(f"{spec.name} with a payload compressed by codec {req.codec}, not negotiated for it")
        if req.req_id == 0 and not spec.is_async:
            raise SessionEnd(f"{spec.name} sent fire-and-forget but is not an ASYNC op")

    # ------------------------------------------------------------------ routing
    def device_of(self, spec: OpSpec, req: wire.Request) -> DeviceState | None:
        """The session's state of the request's device (opened at its first op), or None when the session may not
        use it: no such device, or leased to another holder (answered here when a reply is wanted)."""
        link = self.link
        session, stream = link.session, link.stream
        dev = req.args[0]
        if session.control_only:          # admitted for the daemon's own ops while every session slot was taken
            if session.end_soon is not None:
                session.end_soon(f"{spec.name} from a control session (HELLO_CONTROL: admitted while --max-sessions "
                                 "sessions are open, for the daemon's own ops only)")
            return None
        if type(dev) is not int or not 0 <= dev < self.server.ndevices:     # type(): a bool is not a device
            # No device to latch an asynchronous failure on: answer it when asked, drop it (logged) otherwise.
            log.info("%s: %s on invalid device %r", session.tag(), spec.name, dev)
            if req.req_id:
                stream.writelines(wire.encode_reply(req.req_id, ERR_INVALID_DEVICE))
            return None
        st = session.devices.get(dev)
        if st is None:
            leases = self.server.leases
            assert leases is not None
            refusal = leases.admit(session, dev)
            if refusal is not None:     # leased to another holder: CUDA's answer for a GPU taken exclusively
                log.info("%s: %s refused: %s", session.tag(dev), spec.name, refusal)
                if req.req_id:
                    stream.writelines(wire.encode_reply(req.req_id, ERR_UNAVAILABLE, refusal))
                return None
            st = session.device(dev, stream.event_loop())
        return st

    def run(self, path: Route, st: DeviceState, spec: OpSpec, req: wire.Request, payload: Any, nbytes: int,
            need: int, view: memoryview | None) -> None:
        """Carry out the route fastpath.route chose for a device op whose payload is read."""
        link = self.link
        session = link.session
        req_id = req.req_id
        if path is Route.LOOP:
            out = fastpath.run_on_loop(session, st, self.backend, spec, req.args, payload, req_id == 0)
            if out is not None:
                self.write_outcome(req_id, out)
            return
        if path is Route.FROM_DEVICE:
            assert view is not None
            stream = link.stream
            stream.writelines(fastpath.reply_from_device(st, spec, req_id, req.args, view))
            link.sending_device_memory = stream.write_paused
            return
        worker = st.worker
        tag = (spec.code, req.args, len(payload))
        backend = self.backend
        if req_id == 0:
            if link.oversize:
                fut = worker.submit(dispatch.execute, session, st, backend, spec, req.args, payload, True,
                                    nbytes=nbytes, tag=tag)
                fut.add_done_callback(lambda _f: link.release_oversize())
            else:
                worker.post(dispatch.execute, session, st, backend, spec, req.args, payload, True, nbytes=nbytes,
                            tag=tag)
            return
        link.owe(need)
        if link.oversize:
            worker.call(lambda result, exc: (link.release_oversize(), self.send_outcome(req_id, need, result, exc)),
                        dispatch.execute, session, st, backend, spec, req.args, payload, False, nbytes=nbytes,
                        tag=tag)
        else:
            worker.call(lambda result, exc: self.send_outcome(req_id, need, result, exc),
                        dispatch.execute, session, st, backend, spec, req.args, payload, False, nbytes=nbytes,
                        tag=tag)

    async def land(self, st: DeviceState, spec: OpSpec, req: wire.Request, view: memoryview) -> None:
        """Receive a host-to-device copy straight into device memory (Route.LAND)."""
        link = self.link
        plen = req.payload_len
        t0, early = time.perf_counter(), link.stream.arrived() if plen >= RATE_SAMPLE_MIN_BYTES else 0
        try:
            await link.stream.read_payload_into(view, link.bounds.payload_deadline_s(plen))
        finally:
            link.release_oversize()
        if plen >= RATE_SAMPLE_MIN_BYTES:
            self.rate_sample(plen - early, time.perf_counter() - t0)
        fastpath.landed(st, spec, req.args, plen, t0)
        if req.req_id:
            self.write_outcome(req.req_id, dispatch.Outcome(0))

    # ------------------------------------------------------------------ replies
    def send_outcome(self, req_id: int, need: int, out: dispatch.Outcome | None, exc: BaseException | None) -> None:
        """A worker's answer to request req_id (called on the loop when the job is handed back)."""
        link = self.link
        link.replied(need)
        if link.stream.is_closing():
            if out is not None and out.lent is not None:
                out.lent.release()
            return
        if exc is not None:
            log.error("%s: job raised %r", link.session.tag(), exc)
            link.stream.writelines(wire.encode_reply(req_id, dispatch.ERR_UNKNOWN))
            return
        if out is not None:              # None: the session is closing
            self.write_outcome(req_id, out)

    def write_outcome(self, req_id: int, out: dispatch.Outcome) -> None:
        try:
            parts = wire.encode_reply(req_id, out.err, out.result, out.stdout, out.payload, out.event_times,
                                      out.raw_len, out.codec)
        except wire.ProtocolError as exc:
            # Never leave the client waiting: a result too large for a reply frame becomes an error reply.
            log.error("%s: reply %d cannot be sent (%s); answering cudaErrorUnknown", self.link.session.tag(),
                      req_id, exc)
            parts = wire.encode_reply(req_id, dispatch.ERR_UNKNOWN)
        if out.lent is None:
            self.link.stream.writelines(parts)
        elif len(parts) > 1:
            lent.send(self.link.stream, parts, out.lent)
        else:                             # the error reply above
            self.link.stream.writelines(parts)
            out.lent.release()

    def rate_sample(self, nbytes: int, seconds: float) -> None:
        """nbytes of a bulk payload arrived in `seconds` (what had arrived before the read began is not counted):
        the client learns the rate (a heartbeat notice's result) when it moved by more than RATE_REPORT_CHANGE, and
        compresses by it (compress.c)."""
        link = self.link
        if seconds <= 0 or nbytes < RATE_SAMPLE_MIN_BYTES or not link.session.codecs:
            return
        rate = nbytes / seconds
        link.rx_rate = rate if not link.rx_rate else 0.5 * link.rx_rate + 0.5 * rate
        last = link.rx_reported
        if not last or abs(link.rx_rate - last) > RATE_REPORT_CHANGE * last:
            link.rx_reported = link.rx_rate
            link.stream.writelines(wire.encode_notice(0, info={NOTICE_RATE: int(link.rx_rate)}))
