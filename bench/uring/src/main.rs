//! Issue 40's prototype: the same keep-alive proxy loop for tiny responses on epoll and on
//! io_uring, one thread, so that their CPU per request can be compared (bench/uring.py).
//!
//! Each client connection gets its own connection to the origin; what the client sends is
//! written to the origin and what the origin sends to the client, each direction on its
//! own (a response may come in pieces: nginx writes a head, then sends the file). This
//! measures the path through the kernel, not HTTP.
//!
//! Usage: uring-proto epoll|uring|uring-sqpoll LISTEN_PORT ORIGIN_PORT

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

const BUF: usize = 16 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: uring-proto epoll|uring|uring-sqpoll LISTEN_PORT ORIGIN_PORT");
        std::process::exit(2);
    }
    let listener =
        TcpListener::bind(("127.0.0.1", args[2].parse::<u16>().expect("port"))).expect("bind");
    let origin: u16 = args[3].parse().expect("origin port");
    match args[1].as_str() {
        "epoll" => epoll(listener, origin),
        "uring" => uring(listener, origin, false),
        "uring-sqpoll" => uring(listener, origin, true),
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
