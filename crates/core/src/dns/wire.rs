//! A `resolvers` section's socket: one UDP socket on the first worker for all the
//! section's queries (HAProxy keeps one per nameserver), bound once, so that resolutions
//! do not churn through ephemeral ports. Its receiving task hands each datagram to the
//! query waiting for its id; one nobody waits for is counted on the nameserver it came
//! from (`invalid` if it does not parse, else `outdated`) and dropped.

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
        let wire = Rc::new(Wire {
            sock: tokio::net::UdpSocket::from_std(std)?,
            v6,
            waiting: RefCell::default(),
        });
        tokio::task::spawn_local(receive(wire.clone(), p.clone(), section));
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

    pub async fn send(&self, bytes: &[u8], to: SocketAddr) -> io::Result<usize> {
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
        let bytes = &buf[..n];
        let id = (n >= 2).then(|| u16::from_be_bytes([bytes[0], bytes[1]]));
        let waiter = id.and_then(|id| wire.waiting.borrow().get(&id).cloned());
        match waiter {
            Some(tx) => {
                let _ = tx.send((bytes.to_vec(), ns));
            }
            None if Message::from_vec(bytes).is_err() => p.resolvers[section][ns].invalid.bump(),
            None => p.resolvers[section][ns].outdated.bump(),
        }
    }
}
