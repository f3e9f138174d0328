"""A small HTTP/3 load generator on aioquic (no HTTP/3 load generator is packaged here:
Debian's h2load and curl are built without QUIC). Usage:

    python3 bench/h3load.py HOST PORT PATH SECONDS CONNECTIONS STREAMS

CONNECTIONS QUIC connections, each keeping STREAMS requests in flight for SECONDS
seconds; prints the number of successful (2xx) responses, then the number of failures.
A Python client is far slower than the proxy: what it measures is the proxy's CPU per
request at the rate the client reaches, not the proxy's ceiling.
"""
import asyncio
import ssl
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiters = {}
        self.status = {}

    def quic_event_received(self, event):
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived) and ev.stream_id not in self.status:
                self.status[ev.stream_id] = dict(ev.headers).get(b":status", b"0")
            if isinstance(ev, (HeadersReceived, DataReceived)) and ev.stream_ended:
                w = self.waiters.pop(ev.stream_id, None)
                if w and not w.done():
                    w.set_result(self.status.pop(ev.stream_id, b"0"))

    async def get(self, path):
        sid = self._quic.get_next_available_stream_id()
        fut = asyncio.get_event_loop().create_future()
        self.waiters[sid] = fut
        self.h3.send_headers(sid, [(b":method", b"GET"), (b":scheme", b"https"),
                                   (b":authority", b"bench.test"), (b":path", path)], end_stream=True)
        self.transmit()
        return await asyncio.wait_for(fut, 30)


async def one(host, port, path, until, streams, counts):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = "bench.test"
    async with connect(host, port, configuration=config, create_protocol=Client) as c:
        async def worker():
            while time.monotonic() < until:
                try:
                    status = await c.get(path)
                    counts[0 if status.startswith(b"2") else 1] += 1
                except Exception:
                    counts[1] += 1
        await asyncio.gather(*(worker() for _ in range(streams)))


async def main():
    host, port, path, secs, conns, streams = sys.argv[1:7]
    until = time.monotonic() + float(secs)
    counts = [0, 0]
    await asyncio.gather(*(one(host, int(port), path.encode(), until, int(streams), counts)
                           for _ in range(int(conns))))
    print(counts[0])
    print(counts[1])


asyncio.run(main())
