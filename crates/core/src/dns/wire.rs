//! A `resolvers` section's sockets: one UDP socket on the first worker for all the
//! section's queries (HAProxy keeps one per nameserver), bound once, so that resolutions
//! do not churn through ephemeral ports, and a TCP connection to each `tcp@` nameserver,
//! opened at its first query and again after it closes (messages framed by their two-byte
//! length). Answers are handed to the query waiting for their id; one nobody waits for is
//! counted on the nameserver it came from (`invalid` if it does not parse, else
//! `outdated`) and dropped.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;

use hickory_proto::op::Message;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::runtime::Process;

/// A datagram and the nameserver (its index in the section) it came from.
pub(super) type Datagram = (Vec<u8>, usize);

pub(super) struct Wire {
    sock: tokio::net::UdpSocket,
    /// The socket is IPv6 (dual-stack): IPv4 nameservers are reached mapped.
    v6: bool,
    waiting: RefCell<HashMap<u16, UnboundedSender<Datagram>>>,
    /// By nameserver: the queue of its TCP link (`tcp@`), `None` for UDP.
    links: Vec<Option<UnboundedSender<Vec<u8>>>>,
}

impl Wire {
    /// Opens section `section`'s socket and starts receiving on it (on this worker).
    pub fn open(p: &Arc<Process>, section: usize) -> io::Result<Rc<Wire>> {
        let v6 = p.config.resolvers[section]
            .nameservers
            .iter()
            .any(|n| n.addr.is_ipv6());
        let bind = if v6 {
            SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0))
        } else {
            SocketAddr::from(([0, 0, 0, 0], 0))
        };
        let std = std::net::UdpSocket::bind(bind)?;
        std.set_nonblocking(true)?;
        let mut queues = Vec::new();
        let links = p.config.resolvers[section]
            .nameservers
            .iter()
            .enumerate()
            .map(|(ns, n)| {
                n.tcp.then(|| {
                    let (tx, rx) = unbounded_channel();
                    queues.push((ns, rx));
                    tx
                })
            })
            .collect();
        let wire = Rc::new(Wire {
            sock: tokio::net::UdpSocket::from_std(std)?,
            v6,
            waiting: RefCell::default(),
            links,
        });
        tokio::task::spawn_local(receive(wire.clone(), p.clone(), section));
        for (ns, rx) in queues {
            tokio::task::spawn_local(tcp_link(wire.clone(), (p.clone(), section, ns), rx));
        }
        Ok(wire)
    }

    /// A query id no other query of the section waits on, and where its answers arrive
    /// until [`Wire::forget`].
    pub fn register(&self) -> (u16, UnboundedReceiver<Datagram>) {
        let (tx, rx) = unbounded_channel();
        let mut waiting = self.waiting.borrow_mut();
        let mut id = fastrand::u16(..);
        while waiting.contains_key(&id) {
            id = fastrand::u16(..);
        }
        waiting.insert(id, tx);
        (id, rx)
    }

    pub fn forget(&self, id: u16) {
        self.waiting.borrow_mut().remove(&id);
    }

    /// Sends a query to nameserver `ns` (at `to`): a datagram, or a message queued on
    /// its TCP link.
    pub async fn send(&self, bytes: &[u8], (ns, to): (usize, SocketAddr)) -> io::Result<usize> {
        if let Some(Some(link)) = self.links.get(ns) {
            link.send(bytes.to_vec())
                .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
            return Ok(bytes.len());
        }
        let to = match (self.v6, to.ip()) {
            (true, IpAddr::V4(v4)) => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), to.port()),
            _ => to,
        };
        self.sock.send_to(bytes, to).await
    }
}

/// Hands each datagram from one of the section's nameservers to the query waiting for
/// its id; counts and drops the others.
async fn receive(wire: Rc<Wire>, p: Arc<Process>, section: usize) {
    let nameservers = &p.config.resolvers[section].nameservers;
    let mut buf = vec![0u8; 65536];
    loop {
        let Ok((n, from)) = wire.sock.recv_from(&mut buf).await else {
            // (An error of the socket's own, not of a datagram: not spun on.)
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let from = SocketAddr::new(from.ip().to_canonical(), from.port());
        let Some(ns) = nameservers.iter().position(|x| x.addr == from) else {
            continue;
        };
        wire.dispatch(&p, (section, ns), &buf[..n]);
    }
}

impl Wire {
    /// Hands an answer from nameserver `ns` to the query waiting for its id, or counts it.
    fn dispatch(&self, p: &Process, (section, ns): (usize, usize), bytes: &[u8]) {
        let id = (bytes.len() >= 2).then(|| u16::from_be_bytes([bytes[0], bytes[1]]));
        let waiter = id.and_then(|id| self.waiting.borrow().get(&id).cloned());
        match waiter {
            Some(tx) => {
                let _ = tx.send((bytes.to_vec(), ns));
            }
            None if Message::from_vec(bytes).is_err() => p.resolvers[section][ns].invalid.bump(),
            None => p.resolvers[section][ns].outdated.bump(),
        }
    }
}

/// Nameserver `ns`'s TCP link: connected when a query is queued and it has none, each
/// message written behind its length; its answers are read by a task of their own until
/// the connection closes, and the next query opens another. A query whose connection
/// fails is counted as a send error (its query times out and is sent again).
async fn tcp_link(
    wire: Rc<Wire>,
    (p, section, ns): (Arc<Process>, usize, usize),
    mut queue: UnboundedReceiver<Vec<u8>>,
) {
    use tokio::io::AsyncWriteExt;
    let conf = &p.config.resolvers[section];
    let addr = conf.nameservers[ns].addr;
    // The connection's write half, and whether its reader saw it close.
    let mut writer: Option<(tokio::net::tcp::OwnedWriteHalf, Rc<std::cell::Cell<bool>>)> = None;
    while let Some(msg) = queue.recv().await {
        if writer.as_ref().is_some_and(|(_, closed)| closed.get()) {
            writer = None;
        }
        if writer.is_none() {
            let connect = tokio::net::TcpStream::connect(addr);
            match tokio::time::timeout(conf.timeout_retry, connect).await {
                Ok(Ok(stream)) => {
                    let (rd, wr) = stream.into_split();
                    let closed = Rc::new(std::cell::Cell::new(false));
                    let link = (p.clone(), section, ns);
                    tokio::task::spawn_local(tcp_answers(wire.clone(), link, rd, closed.clone()));
                    writer = Some((wr, closed));
                }
                _ => {
                    p.resolvers[section][ns].snd_error.bump();
                    continue;
                }
            }
        }
        let Some((w, _)) = writer.as_mut() else {
            continue;
        };
        let Ok(len) = u16::try_from(msg.len()) else {
            continue;
        };
        let mut framed = len.to_be_bytes().to_vec();
        framed.extend_from_slice(&msg);
        if w.write_all(&framed).await.is_err() {
            p.resolvers[section][ns].snd_error.bump();
            writer = None;
        }
    }
}

/// Reads the answers of a TCP link until it closes, and says so (`closed`).
async fn tcp_answers(
    wire: Rc<Wire>,
    (p, section, ns): (Arc<Process>, usize, usize),
    mut rd: tokio::net::tcp::OwnedReadHalf,
    closed: Rc<std::cell::Cell<bool>>,
) {
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 2];
    while rd.read_exact(&mut len).await.is_ok() {
        let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
        if rd.read_exact(&mut msg).await.is_err() {
            break;
        }
        wire.dispatch(&p, (section, ns), &msg);
    }
    closed.set(true);
}
