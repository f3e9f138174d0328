//! Issue 40's prototype: the same keep-alive proxy loop for tiny responses on epoll and on
//! io_uring, one thread, so that their CPU per request can be compared (bench/uring.py).
//!
//! Each client connection gets its own connection to the origin; what the client sends is
//! written to the origin and what the origin sends to the client, each direction on its
//! own (a response may come in pieces: nginx writes a head, then sends the file). This
//! measures the path through the kernel, not HTTP.
//!
//! `uring-multi` is the loop with what io_uring adds beyond batching: one multishot receive
//! per socket (armed once, re-armed only when the kernel ends it) taking buffers from a
//! provided buffer ring, and registered (fixed) descriptors instead of per-call lookups.
//!
//! Usage: uring-proto epoll|uring|uring-sqpoll|uring-multi LISTEN_PORT ORIGIN_PORT

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

const BUF: usize = 16 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: uring-proto epoll|uring|uring-sqpoll|uring-multi LISTEN_PORT ORIGIN_PORT");
        std::process::exit(2);
    }
    let listener =
        TcpListener::bind(("127.0.0.1", args[2].parse::<u16>().expect("port"))).expect("bind");
    let origin: u16 = args[3].parse().expect("origin port");
    match args[1].as_str() {
        "epoll" => epoll(listener, origin),
        "uring" => uring(listener, origin, false),
        "uring-sqpoll" => uring(listener, origin, true),
        "uring-multi" => multi::run(listener, origin),
        m => panic!("unknown mode {m}"),
    }
}

fn origin_conn(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("origin");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// A client connection and its origin connection.
struct Pair {
    client: TcpStream,
    origin: TcpStream,
}

fn epoll(listener: TcpListener, origin: u16) {
    listener.set_nonblocking(true).expect("nonblocking");
    // SAFETY: plain system calls on descriptors this function owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    let add = |fd: RawFd, token: u64| {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` lives for the call; `fd` is open.
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
    };
    add(listener.as_raw_fd(), u64::MAX);
    let mut pairs: Vec<Option<Pair>> = Vec::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut buf = vec![0u8; BUF];
    loop {
        // SAFETY: `events` has room for 256 entries.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 256, -1) };
        for ev in events.iter().take(n.max(0) as usize) {
            let token = ev.u64;
            if token == u64::MAX {
                while let Ok((c, _)) = listener.accept() {
                    c.set_nodelay(true).ok();
                    c.set_nonblocking(true).ok();
                    let o = origin_conn(origin);
                    o.set_nonblocking(true).ok();
                    let i = pairs.len() as u64;
                    add(c.as_raw_fd(), i << 1);
                    add(o.as_raw_fd(), (i << 1) | 1);
                    pairs.push(Some(Pair {
                        client: c,
                        origin: o,
                    }));
                }
                continue;
            }
            let i = (token >> 1) as usize;
            let Some(p) = pairs[i].as_mut() else { continue };
            let (from, to) = match token & 1 {
                0 => (&mut p.client, &mut p.origin),
                _ => (&mut p.origin, &mut p.client),
            };
            match from.read(&mut buf) {
                Ok(0) => pairs[i] = None,
                Ok(k) => {
                    if to.write_all(&buf[..k]).is_err() {
                        pairs[i] = None;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => pairs[i] = None,
            }
        }
    }
}

/// What a completion is for.
const ACCEPT: u64 = 0;
const RECV_CLIENT: u64 = 1;
const SEND_ORIGIN: u64 = 2;
const RECV_ORIGIN: u64 = 3;
const SEND_CLIENT: u64 = 4;

/// A pair and a buffer per direction (client to origin, origin to client), kept until no
/// operation in flight points into its buffers.
struct Conn {
    pair: Pair,
    up: Box<[u8]>,
    down: Box<[u8]>,
    in_flight: u8,
    closing: bool,
}

fn uring(listener: TcpListener, origin: u16, sqpoll: bool) {
    use io_uring::{opcode, types, IoUring};
    let mut builder = IoUring::builder();
    if sqpoll {
        builder.setup_sqpoll(2000);
    } else {
        builder
            .setup_coop_taskrun()
            .setup_single_issuer()
            .setup_defer_taskrun();
    }
    let mut ring = builder.build(512).expect("io_uring");
    let lfd = listener.as_raw_fd();
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let push = |ring: &mut IoUring, e: io_uring::squeue::Entry| {
        // SAFETY: every buffer an entry points into is owned by `conns` and stays put
        // (boxed) until the entry's completion is seen.
        while unsafe { ring.submission().push(&e) }.is_err() {
            ring.submit().expect("submit");
        }
    };
    push(
        &mut ring,
        opcode::Accept::new(types::Fd(lfd), std::ptr::null_mut(), std::ptr::null_mut())
            .build()
            .user_data(ACCEPT),
    );
    loop {
        ring.submit_and_wait(1).expect("submit_and_wait");
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (data, res) in done {
            let (i, op) = ((data >> 8) as usize, data & 0xff);
            if op == ACCEPT {
                push(
                    &mut ring,
                    opcode::Accept::new(types::Fd(lfd), std::ptr::null_mut(), std::ptr::null_mut())
                        .build()
                        .user_data(ACCEPT),
                );
                if res < 0 {
                    continue;
                }
                // SAFETY: the accepted descriptor is new and owned by nobody else.
                let client = unsafe { TcpStream::from_raw_fd(res) };
                client.set_nodelay(true).ok();
                let c = Conn {
                    pair: Pair {
                        client,
                        origin: origin_conn(origin),
                    },
                    up: vec![0u8; BUF].into_boxed_slice(),
                    down: vec![0u8; BUF].into_boxed_slice(),
                    in_flight: 2,
                    closing: false,
                };
                let i = conns.len();
                conns.push(Some(c));
                let c = conns[i].as_mut().expect("just pushed");
                let e = opcode::Recv::new(
                    types::Fd(c.pair.client.as_raw_fd()),
                    c.up.as_mut_ptr(),
                    BUF as u32,
                );
                push(
                    &mut ring,
                    e.build().user_data(((i as u64) << 8) | RECV_CLIENT),
                );
                let e = opcode::Recv::new(
                    types::Fd(c.pair.origin.as_raw_fd()),
                    c.down.as_mut_ptr(),
                    BUF as u32,
                );
                push(
                    &mut ring,
                    e.build().user_data(((i as u64) << 8) | RECV_ORIGIN),
                );
                continue;
            }
            let Some(c) = conns[i].as_mut() else { continue };
            c.in_flight -= 1;
            if res <= 0 || c.closing {
                // Both sockets shut: the other direction's operation completes too; the
                // buffers go once nothing in flight points into them.
                if !c.closing {
                    c.closing = true;
                    let _ = c.pair.client.shutdown(std::net::Shutdown::Both);
                    let _ = c.pair.origin.shutdown(std::net::Shutdown::Both);
                }
                if c.in_flight == 0 {
                    conns[i] = None;
                }
                continue;
            }
            c.in_flight += 1;
            let (client, origin) = (c.pair.client.as_raw_fd(), c.pair.origin.as_raw_fd());
            let (up, down) = (c.up.as_mut_ptr(), c.down.as_mut_ptr());
            let tag = |op: u64| ((i as u64) << 8) | op;
            let next = match op {
                RECV_CLIENT => opcode::Send::new(types::Fd(origin), up, res as u32)
                    .build()
                    .user_data(tag(SEND_ORIGIN)),
                SEND_ORIGIN => opcode::Recv::new(types::Fd(client), up, BUF as u32)
                    .build()
                    .user_data(tag(RECV_CLIENT)),
                RECV_ORIGIN => opcode::Send::new(types::Fd(client), down, res as u32)
                    .build()
                    .user_data(tag(SEND_CLIENT)),
                _ => opcode::Recv::new(types::Fd(origin), down, BUF as u32)
                    .build()
                    .user_data(tag(RECV_ORIGIN)),
            };
            push(&mut ring, next);
        }
    }
}

/// The loop on multishot receives, a provided buffer ring and fixed descriptors.
mod multi {
    use std::alloc::{alloc_zeroed, Layout};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::sync::atomic::{AtomicU16, Ordering};

    use io_uring::types::{BufRingEntry, Fixed};
    use io_uring::{cqueue, opcode, types, IoUring};

    use super::{origin_conn, BUF};

    /// Buffers in the ring (a power of two), each `BUF` bytes.
    const BUFS: u16 = 512;
    const GROUP: u16 = 0;
    const ACCEPT: u64 = u64::MAX;
    /// What a completion is for: a receive on the connection's client (0) or origin (1)
    /// socket, or a send to it (2, 3) of buffer `bid`.
    fn tag(conn: usize, op: u64, bid: u16) -> u64 {
        ((conn as u64) << 24) | (u64::from(bid) << 8) | op
    }

    /// The provided buffer ring: its entries (page-aligned, shared with the kernel), the
    /// buffers, and the tail this side advances as it gives buffers back.
    struct Ring {
        entries: *mut BufRingEntry,
        bufs: Vec<u8>,
        tail: u16,
    }

    impl Ring {
        fn new(ring: &IoUring) -> Ring {
            let layout = Layout::from_size_align(BUFS as usize * 16, 4096).expect("layout");
            // SAFETY: a non-zero size; the memory is zeroed, as the kernel wants a new
            // ring, and lives as long as the process (never freed: the ring stays
            // registered until exit).
            let entries = unsafe { alloc_zeroed(layout) } as *mut BufRingEntry;
            assert!(!entries.is_null());
            // SAFETY: `entries` is page-aligned memory for BUFS entries that stays put.
            unsafe {
                ring.submitter()
                    .register_buf_ring_with_flags(entries as u64, BUFS, GROUP, 0)
                    .expect("register_buf_ring");
            }
            let mut r = Ring {
                entries,
                bufs: vec![0u8; BUFS as usize * BUF],
                tail: 0,
            };
            for bid in 0..BUFS {
                r.give_back(bid);
            }
            r
        }

        fn buf(&mut self, bid: u16) -> *mut u8 {
            self.bufs[bid as usize * BUF..].as_mut_ptr()
        }

        /// Hands buffer `bid` to the kernel again.
        fn give_back(&mut self, bid: u16) {
            let addr = self.buf(bid) as u64;
            // SAFETY: the index is masked into the ring; the kernel reads an entry only
            // once the tail moves past it, which happens below.
            let e = unsafe { &mut *self.entries.add((self.tail & (BUFS - 1)) as usize) };
            e.set_addr(addr);
            e.set_len(BUF as u32);
            e.set_bid(bid);
            self.tail = self.tail.wrapping_add(1);
            // SAFETY: the tail is the u16 the kernel reads in the first entry; the store
            // is a release, ordering the entry's writes before it.
            unsafe {
                let tail = BufRingEntry::tail(self.entries) as *const AtomicU16;
                (*tail).store(self.tail, Ordering::Release);
            }
        }
    }

    pub fn run(listener: TcpListener, origin: u16) {
        let mut ring = IoUring::builder()
            .setup_coop_taskrun()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(1024)
            .expect("io_uring");
        ring.submitter().register_files_sparse(4096).expect("files");
        let mut bufs = Ring::new(&ring);
        let lfd = listener.as_raw_fd();
        // Each connection: its client and origin sockets, fixed at slots 2i and 2i+1.
        let mut conns: Vec<Option<(TcpStream, TcpStream)>> = Vec::new();
        let push = |ring: &mut IoUring, e: io_uring::squeue::Entry| {
            // SAFETY: every buffer an entry points into is the ring's, which stays put.
            while unsafe { ring.submission().push(&e) }.is_err() {
                ring.submit().expect("submit");
            }
        };
        let accept = || {
            opcode::Accept::new(types::Fd(lfd), std::ptr::null_mut(), std::ptr::null_mut())
                .build()
                .user_data(ACCEPT)
        };
        let recv = |i: usize, side: u64| {
            opcode::RecvMulti::new(Fixed((2 * i) as u32 + side as u32), GROUP)
                .build()
                .user_data(tag(i, side, 0))
        };
        push(&mut ring, accept());
        loop {
            ring.submit_and_wait(1).expect("submit_and_wait");
            let done: Vec<(u64, i32, u32)> = ring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags()))
                .collect();
            for (data, res, flags) in done {
                if data == ACCEPT {
                    push(&mut ring, accept());
                    if res < 0 {
                        continue;
                    }
                    // SAFETY: the accepted descriptor is new and owned by nobody else.
                    let client = unsafe { TcpStream::from_raw_fd(res) };
                    client.set_nodelay(true).ok();
                    let o = origin_conn(origin);
                    let i = conns.len();
                    ring.submitter()
                        .register_files_update((2 * i) as u32, &[client.as_raw_fd(), o.as_raw_fd()])
                        .expect("files update");
                    conns.push(Some((client, o)));
                    push(&mut ring, recv(i, 0));
                    push(&mut ring, recv(i, 1));
                    continue;
                }
                let (i, bid, op) = ((data >> 24) as usize, (data >> 8) as u16, data & 0xff);
                if op >= 2 {
                    // A send done: its buffer goes back to the ring.
                    bufs.give_back(bid);
                    continue;
                }
                if res <= 0 {
                    if let Some(b) = cqueue::buffer_select(flags) {
                        bufs.give_back(b);
                    }
                    if let Some((c, o)) = conns[i].take() {
                        let _ = c.shutdown(std::net::Shutdown::Both);
                        let _ = o.shutdown(std::net::Shutdown::Both);
                    }
                    continue;
                }
                let Some(b) = cqueue::buffer_select(flags) else { continue };
                if conns[i].is_none() {
                    bufs.give_back(b);
                    continue;
                }
                // What one side sent goes to the other, from the buffer it arrived in.
                let to = Fixed((2 * i) as u32 + (1 - op as u32));
                let send = opcode::Send::new(to, bufs.buf(b), res as u32)
                    .build()
                    .user_data(tag(i, 2 + op, b));
                push(&mut ring, send);
                if !cqueue::more(flags) {
                    push(&mut ring, recv(i, op));
                }
            }
        }
    }
}
