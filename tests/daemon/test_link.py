"""link.py's waits are woken by events, not by polling: the reply bound's wait wakes when the client has read enough
of what is unsent (the transport's writer resuming at a moved mark) or when a job hands its reply back, and ends a
client that reads nothing for frame_timeout_s. Over a real loopback socket whose client reads only when told."""
from __future__ import annotations

import asyncio
import socket

import pytest

from pyvgpu_daemon.bounds import Bounds
from pyvgpu_daemon.errors import SessionEnd
from pyvgpu_daemon.link import Link
from pyvgpu_daemon.session import Session
from pyvgpu_daemon.stream import FrameStream

MIB = 1 << 20


class Counting(Link):
    """A Link that counts how often its condition is evaluated: a 20 ms poll would evaluate it ~50 times a second."""
    checks = 0

    def replies_fit(self, need: int) -> bool:
        self.checks += 1
        return super().replies_fit(need)


async def connected(bounds: Bounds) -> tuple[Counting, socket.socket, asyncio.AbstractServer]:
    loop = asyncio.get_running_loop()
    made: asyncio.Future[FrameStream] = loop.create_future()
    server = await loop.create_server(lambda: FrameStream(made.set_result), "127.0.0.1", 0)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    client.setblocking(False)
    stream = await made
    link = Counting(Session(1, "test", None, 1), stream, bounds, asyncio.Lock())
    return link, client, server


async def read(client: socket.socket, n: int) -> int:
    loop = asyncio.get_running_loop()
    got = 0
    while got < n:
        got += len(await loop.sock_recv(client, min(1 << 20, n - got)))
    return got


def test_the_reply_wait_wakes_when_the_client_reads():
    async def main():
        link, client, server = await connected(Bounds(reply_queue_bytes=4 * MIB, frame_timeout_s=30))
        link.stream.writelines([bytes(8 * MIB)])              # 8 MiB unsent: over the 4 MiB bound with 1 MiB more
        assert not link.replies_fit(MIB)
        waiter = asyncio.ensure_future(link.wait_replies_read(MIB))
        await asyncio.sleep(1.0)
        assert not waiter.done()                            # the client read nothing: still waiting ...
        assert link.checks <= 3, f"condition evaluated {link.checks} times in 1 s: polled"   # ... without polling
        await read(client, 6 * MIB)                         # now at most 2 MiB are left unsent: 2 + 1 <= 4
        await asyncio.wait_for(waiter, 10)
        assert link.replies_fit(MIB)
        assert link.stream.transport.get_write_buffer_limits() == (0, FrameStream.WRITE_HIGH)   # marks put back
        await read(client, 2 * MIB)
        client.close()
        server.close()
    asyncio.run(main())


def test_the_reply_wait_wakes_when_a_job_hands_its_reply_back():
    async def main():
        link, client, server = await connected(Bounds(reply_queue_bytes=4 * MIB, frame_timeout_s=30))
        link.owe(3 * MIB)                                   # a job's 3 MiB reply is owed
        waiter = asyncio.ensure_future(link.wait_replies_read(2 * MIB))
        await asyncio.sleep(0.5)
        assert not waiter.done() and link.checks <= 3
        link.replied(3 * MIB)                               # handed back (and sent: the client's buffer takes it)
        await asyncio.wait_for(waiter, 5)
        assert link.outstanding == 0 and link.reply_owed == 0
        client.close()
        server.close()
    asyncio.run(main())


def test_a_client_that_reads_nothing_is_ended_after_frame_timeout():
    async def main():
        link, client, server = await connected(Bounds(reply_queue_bytes=4 * MIB, frame_timeout_s=0.5))
        link.stream.writelines([bytes(8 * MIB)])
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(SessionEnd, match="read none of its"):
            await asyncio.wait_for(link.wait_replies_read(MIB), 10)
        assert 0.5 <= asyncio.get_running_loop().time() - t0 < 5
        client.close()
        server.close()
    asyncio.run(main())
