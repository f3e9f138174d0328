"""An HTTP/3 client for sluice's tests, on aioquic (PyPI).

Usage: h3client.py HOST PORT  < requests.json  > results.json

With "resume" set on the first request, a first connection takes a session ticket and
the requests go over a second one that resumes the session (see `resumed`). A request with
"tunnel": [messages] is a CONNECT to its "authority" (see `Client.tunnel`). Otherwise
the requests (a JSON list) go over one QUIC connection, all at once unless
"sequential" is set on the first; with "stall" set on the first, they are sent and the
client then ignores every datagram it receives (it neither reads nor acknowledges) but
sends a PING each second until it is killed. Each request is {"method", "path",
"headers": [[name, value]...], "body": text, "body_size": N (that many 'x' bytes
instead), "trailers": [...], "rebind": true (the client moves to a new local port
first), "pings": N (instead of a request, N PING frames in as many packets, then the
connection's end is awaited: the result is {"closed": error_code, "reason": text})}.
Each result is {"status", "headers", "body" (text, or its size and a sample when
large), "body_size", "trailers", "reset" (the server reset the stream)}.
"""
import asyncio
import json
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.results = {}
        self.waiters = {}
        # Woken at every event of a stream (a tunnel waits for its answer and its echoes).
        self.progress = asyncio.Event()
        self.terminated = None

    def finish(self, sid):
        w = self.waiters.pop(sid, None)
        if w is not None and not w.done():
            w.set_result(self.results[sid])

    def quic_event_received(self, event):
        self.progress.set()
        if isinstance(event, ConnectionTerminated):
            self.terminated = {"closed": event.error_code, "reason": event.reason_phrase}
        if isinstance(event, StreamReset):
            r = self.results.setdefault(event.stream_id, {"headers": [], "body": b"", "trailers": []})
            r["reset"] = event.error_code
            self.finish(event.stream_id)
        for ev in self.h3.handle_event(event):
            if isinstance(ev, HeadersReceived):
                r = self.results.setdefault(ev.stream_id, {"headers": [], "body": b"", "trailers": []})
                fields = [[k.decode(), v.decode()] for k, v in ev.headers]
                if "status" in r:
                    r["trailers"] = fields
                else:
                    r["status"] = int(dict(fields)[":status"])
                    r["headers"] = [f for f in fields if not f[0].startswith(":")]
                if ev.stream_ended:
                    self.finish(ev.stream_id)
            elif isinstance(ev, DataReceived):
                r = self.results.setdefault(ev.stream_id, {"headers": [], "body": b"", "trailers": []})
                r["body"] += ev.data
                if ev.stream_ended:
                    self.finish(ev.stream_id)

    async def until(self, cond):
        while not cond():
            self.progress.clear()
            await asyncio.wait_for(self.progress.wait(), 30)

    async def tunnel(self, req):
        """A CONNECT to req["authority"]: once answered 2xx, each of req["tunnel"] is sent
        and its echo awaited, then the stream is ended and read to its end."""
        sid = self._quic.get_next_available_stream_id()
        fut = asyncio.get_event_loop().create_future()
        self.waiters[sid] = fut
        headers = [(b":method", b"CONNECT"), (b":authority", req["authority"].encode())]
        self.h3.send_headers(sid, headers, end_stream=False)
        self.transmit()
        await self.until(lambda: "status" in self.results.get(sid, {}) or fut.done())
        if fut.done() or not 200 <= self.results[sid]["status"] < 300:
            r = await asyncio.wait_for(fut, 30)
            return dict(r, body=r["body"].decode("latin-1"), body_size=len(r["body"]))
        sent = 0
        for msg in req["tunnel"]:
            self.h3.send_data(sid, msg.encode(), end_stream=False)
            self.transmit()
            sent += len(msg)
            await self.until(lambda: len(self.results[sid]["body"]) >= sent)
        self.h3.send_data(sid, b"", end_stream=True)
        self.transmit()
        r = await asyncio.wait_for(fut, 30)
        return dict(r, body=r["body"].decode("latin-1"), body_size=len(r["body"]))

    async def pings(self, n):
        """Up to n PING frames, each in a packet of its own, until the connection ends.
        After every 16, the server's next acknowledgement is awaited (or a second): PINGs
        the congestion window holds back would go out together as one frame."""
        for i in range(n):
            if self.terminated is not None:
                break
            self._quic.send_ping(i)
            self.transmit()
            if i % 16 == 15:
                self.progress.clear()
                try:
                    await asyncio.wait_for(self.progress.wait(), 1)
                except asyncio.TimeoutError:
                    pass
        await self.until(lambda: self.terminated is not None)
        return self.terminated

    async def request(self, req):
        if req.get("tunnel") is not None:
            return await self.tunnel(req)
        if "pings" in req:
            return await self.pings(req["pings"])
        if req.get("rebind"):
            # A new local port: the server sees the client's address change (migration).
            loop = asyncio.get_event_loop()
            old = self._transport
            await loop.create_datagram_endpoint(lambda: self, local_addr=("::", 0))
            old.close()
        sid = self._quic.get_next_available_stream_id()
        body = req.get("body", "").encode()
        if "body_size" in req:
            body = b"x" * req["body_size"]
        trailers = [(k.encode(), v.encode()) for k, v in req.get("trailers", [])]
        headers = [
            (b":method", req.get("method", "GET").encode()),
            (b":scheme", b"https"),
            (b":authority", req.get("authority", "localhost").encode()),
            (b":path", req.get("path", "/").encode()),
        ] + [(k.encode(), v.encode()) for k, v in req.get("headers", [])]
        fut = asyncio.get_event_loop().create_future()
        self.waiters[sid] = fut
        self.h3.send_headers(sid, headers, end_stream=not body and not trailers)
        # Large bodies go in pieces, as flow control lets them.
        step = 16384
        for i in range(0, len(body), step):
            last = i + step >= len(body) and not trailers
            self.h3.send_data(sid, body[i : i + step], end_stream=last)
            self.transmit()
            await asyncio.sleep(0)
        if trailers:
            self.h3.send_headers(sid, trailers, end_stream=True)
        self.transmit()
        r = await asyncio.wait_for(fut, 30)
        out = dict(r)
        out["body_size"] = len(r["body"])
        out["body"] = r["body"].decode("latin-1") if len(r["body"]) <= 4096 else r["body"][:64].decode("latin-1")
        return out


async def resumed(host, port, config, reqs):
    """A first connection takes the server's session ticket; a second resumes with it and
    would send its requests as 0-RTT early data if the ticket allowed any. Reports the
    ticket's early data allowance, whether the session resumed and early data was
    accepted, and the second connection's results."""
    tickets = []
    async with connect(host, port, configuration=config, create_protocol=Client,
                       session_ticket_handler=tickets.append) as client:
        await client.request({"path": "/"})
    config.session_ticket = tickets[-1]
    async with connect(host, port, configuration=config, create_protocol=Client,
                       wait_connected=False) as client:
        # All at once: with early data allowed, they leave before the handshake ends.
        results = await asyncio.gather(*(client.request(r) for r in reqs))
        tls = client._quic.tls
        return {"ticket_max_early_data": tickets[-1].max_early_data_size,
                "resumed": tls.session_resumed, "early_data_accepted": tls.early_data_accepted,
                "results": results}


async def main():
    host, port = sys.argv[1], int(sys.argv[2])
    reqs = json.load(sys.stdin)
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.verify_mode = ssl.CERT_NONE
    config.server_name = "localhost"
    if reqs and reqs[0].get("resume"):
        json.dump([await resumed(host, port, config, reqs)], sys.stdout)
        return
    async with connect(host, port, configuration=config, create_protocol=Client) as client:
        if reqs and reqs[0].get("stall"):
            for r in reqs:
                asyncio.ensure_future(client.request(r))
            await asyncio.sleep(0)
            client.datagram_received = lambda data, addr: None
            # The connection lasts until the client is killed, however slowly the server
            # comes to fill its window: a PING each second keeps the server's idle timer
            # from firing, and the client's own, which nothing received restarts, is
            # made endless.
            client._quic._idle_timeout = lambda: 3600.0
            print("stalled", file=sys.stderr, flush=True)
            while True:
                client._quic.send_ping(0)
                client.transmit()
                await asyncio.sleep(1)
        if reqs and reqs[0].get("sequential"):
            results = [await client.request(r) for r in reqs]
        else:
            results = await asyncio.gather(*(client.request(r) for r in reqs))
    json.dump(results, sys.stdout)


async def bounded():
    # Any run ends within a minute whatever the server does, so that a test never hangs
    # on it (a client that stalls on purpose is killed by its test before).
    await asyncio.wait_for(main(), 60)


asyncio.run(bounded())
