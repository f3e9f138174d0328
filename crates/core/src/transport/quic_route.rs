//! Which worker a QUIC datagram belongs to, and the datagrams that are no QUIC packet.
//!
//! Each worker has its own socket in the address's SO_REUSEPORT group and its own endpoint,
//! and the kernel picks a socket by hashing a datagram's addresses. So a client whose
//! address changes (RFC 9000's migration), or whose handshake is under way while the group
//! grows by another connection's socket (the hash's pick depends on the group's size),
//! reaches a worker that does not know its connection. The connection IDs a worker gives
//! out therefore name it ([`WorkerCids`]), and a worker that receives a datagram naming
//! another hands it over ([`Routes`]), as HAProxy's listener dispatches datagrams to its
//! threads by connection ID. [`addressee`] reads the name, and finds the datagrams that
//! cannot be a QUIC packet (dropped and counted in [`Tally`]).
//!
//! Invariants:
//! - A connection ID of this process is [`CID_LEN`] bytes of system randomness but for its
//!   first two bytes, the worker's index masked by the next two. Anyone who knows the scheme
//!   can tell which worker a CID names (as with QUIC-LB's clear-text routing); it says
//!   nothing of the client, and CIDs of one connection are not linkable otherwise.
//! - A datagram moves whole, with what its receive said of it, into the named worker's
//!   bounded inbox (at most [`INBOX`] datagrams and [`INBOX_BYTES`] bytes, the bytes a gauge
//!   of the receiving worker's: [`Tally::held`]); when that is full it is dropped and counted
//!   (QUIC sends again what is lost). Only datagrams naming another worker with an
//!   endpoint on the same listener move; every other datagram is this worker's.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use quinn::udp::RecvMeta;
use quinn::{ConnectionId, ConnectionIdGenerator};
use tokio::sync::mpsc;

/// The length of the connection IDs this process gives out.
pub const CID_LEN: usize = 8;

/// Datagrams a worker's inbox holds at most (each at most one receive's worth).
pub const INBOX: usize = 256;

/// Bytes a worker's inboxes hold at most together (a receive's worth may be a batch of
/// datagrams, up to 64 KiB).
pub const INBOX_BYTES: u64 = 512 * 1024;

/// Bytes a protected packet has at least after its packet number's offset: the 4 bytes
/// header protection assumes, then its 16-byte sample (RFC 9001, 5.4.2).
const MIN_PROTECTED: usize = 20;

/// The smallest datagram with a short header: a stateless reset's 21 bytes (RFC 9000,
/// 10.3), shorter than any protected packet.
const MIN_SHORT: usize = 21;
// (A short header holds the first byte and a whole connection ID.)
const _: () = assert!(MIN_SHORT > CID_LEN);

/// The smallest datagram that may carry a client's Initial packet (RFC 9000, 14.1).
const MIN_INITIAL_DATAGRAM: usize = 1200;

/// What one worker's QUIC sockets counted (`show activity`).
#[derive(Debug, Default)]
pub struct Tally {
    /// Datagrams that are no QUIC packet, dropped.
    pub malformed: AtomicU64,
    /// Datagrams handed to the worker their connection ID names.
    pub forwarded: AtomicU64,
    /// Datagrams for another worker that its inbox had no room for.
    pub lost: AtomicU64,
    /// Bytes other workers handed over that wait in this worker's inboxes (a gauge).
    pub held: AtomicU64,
}

impl Tally {
    fn bump(count: &AtomicU64) {
        count.fetch_add(1, Relaxed);
    }
}

/// A datagram handed from the worker that received it to the one it names.
#[derive(Debug)]
pub struct Forwarded {
    meta: RecvMeta,
    bytes: Vec<u8>,
}

/// The inboxes of one QUIC listener's workers, by worker index.
#[derive(Debug)]
pub struct Routes {
    inboxes: Box<[OnceLock<Inbox>]>,
}

/// A worker's inbox as the others see it: where to send, and its worker's tally (whose
/// `held` bounds it).
#[derive(Debug)]
struct Inbox {
    tx: mpsc::Sender<Forwarded>,
    tally: Arc<Tally>,
}

/// Every QUIC listener's [`Routes`] in a process, by (frontend, listener), made as the
/// first of its workers asks.
#[derive(Debug, Default)]
pub struct ListenerRoutes(Mutex<HashMap<(usize, usize), Arc<Routes>>>);

impl ListenerRoutes {
    pub fn get(&self, listener: (usize, usize), workers: usize) -> Arc<Routes> {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(listener)
            .or_insert_with(|| {
                Arc::new(Routes {
                    inboxes: (0..workers).map(|_| OnceLock::new()).collect(),
                })
            })
            .clone()
    }
}

impl Routes {
    /// Worker `tid`'s endpoint serves this listener: its inbox.
    fn join(&self, tid: usize, tally: Arc<Tally>) -> mpsc::Receiver<Forwarded> {
        let (tx, rx) = mpsc::channel(INBOX);
        if let Some(slot) = self.inboxes.get(tid) {
            let _ = slot.set(Inbox { tx, tally });
        }
        rx
    }
}

/// One worker's place among a listener's [`Routes`]: what its socket forwards, receives
/// from the others, and counts.
#[derive(Debug)]
pub struct Route {
    routes: Arc<Routes>,
    tid: usize,
    inbox: Mutex<mpsc::Receiver<Forwarded>>,
    pub tally: Arc<Tally>,
}

impl Drop for Route {
    /// What still waits in the inbox leaves the gauge with it.
    fn drop(&mut self) {
        let inbox = self.inbox.get_mut().unwrap_or_else(|e| e.into_inner());
        inbox.close();
        while let Ok(f) = inbox.try_recv() {
            self.tally.held.fetch_sub(f.bytes.len() as u64, Relaxed);
        }
    }
}

impl Route {
    pub fn new(routes: Arc<Routes>, tid: usize, tally: Arc<Tally>) -> Route {
        let inbox = Mutex::new(routes.join(tid, tally.clone()));
        Route {
            routes,
            tid,
            inbox,
            tally,
        }
    }

    /// Sorts what a receive got (`n` buffers, each one datagram or several of one sender
    /// at `stride`): a buffer naming another worker goes there, a datagram that is no QUIC
    /// packet is counted, and a buffer emptied either way has its length set to 0, which the
    /// endpoint skips.
    pub fn sort(&self, bufs: &[io::IoSliceMut<'_>], meta: &mut [RecvMeta], n: usize) {
        for (buf, m) in bufs.iter().zip(meta.iter_mut()).take(n) {
            let data = &buf[..m.len.min(buf.len())];
            let stride = m.stride.max(1);
            if data.is_empty() {
                Tally::bump(&self.tally.malformed);
            }
            // Datagrams batched together come from one sender's address, hence (but for a
            // client that multiplexes connections on one port) one connection: the first
            // well-formed one names the worker for all. When some of a batch are malformed
            // and others not, the endpoint drops the malformed ones itself.
            let mut to = None;
            for datagram in data.chunks(stride) {
                match addressee(datagram) {
                    Err(Malformed) => Tally::bump(&self.tally.malformed),
                    Ok(worker) => to = Some(to.unwrap_or(worker)),
                }
            }
            match to {
                None => m.len = 0,
                Some(Some(tid)) if tid != self.tid && self.forward(tid, *m, data) => m.len = 0,
                Some(_) => {}
            }
        }
    }

    /// Hands a buffer to worker `tid` if it serves this listener; false if it does not (or
    /// no longer does: its endpoint has stopped), and the buffer stays here.
    fn forward(&self, tid: usize, meta: RecvMeta, data: &[u8]) -> bool {
        let Some(inbox) = self.routes.inboxes.get(tid).and_then(OnceLock::get) else {
            return false;
        };
        let len = data.len() as u64;
        if inbox.tally.held.fetch_add(len, Relaxed) + len > INBOX_BYTES {
            inbox.tally.held.fetch_sub(len, Relaxed);
            Tally::bump(&self.tally.lost);
            return true;
        }
        let bytes = data.to_vec();
        let sent = inbox.tx.try_send(Forwarded { meta, bytes });
        if sent.is_err() {
            inbox.tally.held.fetch_sub(len, Relaxed);
        }
        match sent {
            Ok(()) => Tally::bump(&self.tally.forwarded),
            Err(mpsc::error::TrySendError::Full(_)) => Tally::bump(&self.tally.lost),
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
        }
        true
    }

    /// Fills `bufs` with datagrams other workers handed over, if there are any.
    pub fn poll_inbox(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<usize> {
        let mut inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        while n < bufs.len().min(meta.len()) {
            let got = match n {
                // The first poll leaves a waker when there is nothing.
                0 => match inbox.poll_recv(cx) {
                    Poll::Ready(Some(f)) => f,
                    _ => return Poll::Pending,
                },
                _ => match inbox.try_recv() {
                    Ok(f) => f,
                    Err(_) => break,
                },
            };
            self.tally.held.fetch_sub(got.bytes.len() as u64, Relaxed);
            let Some(room) = bufs[n].get_mut(..got.bytes.len()) else {
                Tally::bump(&self.tally.lost);
                continue;
            };
            room.copy_from_slice(&got.bytes);
            meta[n] = got.meta;
            n += 1;
        }
        match n {
            0 => Poll::Pending,
            n => Poll::Ready(n),
        }
    }
}

/// A datagram that cannot be a QUIC packet of a client.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// The worker a datagram's first packet names by its destination connection ID, if that
/// has this process's length (a client's first Initial names the ID it chose at random:
/// whichever worker that reads as takes the connection, consistently). Checks what is read
/// on the way: the lengths the header gives hold in the datagram, a version 1 header's
/// IDs are at most 20 bytes, a packet leaves room for its protection's sample, an Initial
/// comes in a datagram of at least 1,200 bytes, and no client sends a Retry.
pub fn addressee(d: &[u8]) -> Result<Option<usize>, Malformed> {
    let first = *d.first().ok_or(Malformed)?;
    if first & 0x80 == 0 {
        // A short header: the destination ID is one this process gave out, of its length
        // (or a stateless reset's random bytes, which name any worker or none).
        if d.len() < MIN_SHORT {
            return Err(Malformed);
        }
        return Ok(Some(worker_of(&d[1..1 + CID_LEN])));
    }
    let version = u32::from_be_bytes(d.get(1..5).ok_or(Malformed)?.try_into().unwrap_or_default());
    let dcid_len = usize::from(*d.get(5).ok_or(Malformed)?);
    let dcid = d.get(6..6 + dcid_len).ok_or(Malformed)?;
    if version != 1 {
        // Another version (the endpoint answers with the versions it has) or a version
        // negotiation packet: nothing more is known of its layout.
        return Ok(None);
    }
    let scid_len = usize::from(*d.get(6 + dcid_len).ok_or(Malformed)?);
    if dcid_len > 20 || scid_len > 20 {
        return Err(Malformed);
    }
    let mut at = 7 + dcid_len + scid_len;
    match (first >> 4) & 3 {
        // Initial: a token, in a datagram padded to its minimum.
        0 => {
            if d.len() < MIN_INITIAL_DATAGRAM {
                return Err(Malformed);
            }
            let token_len = varint(d, &mut at)?;
            at = at.checked_add(token_len).ok_or(Malformed)?;
        }
        3 => return Err(Malformed),
        _ => {}
    }
    let length = varint(d, &mut at)?;
    if length < MIN_PROTECTED || at.checked_add(length).is_none_or(|end| end > d.len()) {
        return Err(Malformed);
    }
    Ok((dcid_len == CID_LEN).then(|| worker_of(dcid)))
}

/// A QUIC variable-length integer at `*at`, which moves past it.
fn varint(d: &[u8], at: &mut usize) -> Result<usize, Malformed> {
    let first = *d.get(*at).ok_or(Malformed)?;
    let len = 1usize << (first >> 6);
    let bytes = d.get(*at..*at + len).ok_or(Malformed)?;
    let mut v = u64::from(first & 0x3f);
    for b in &bytes[1..] {
        v = (v << 8) | u64::from(*b);
    }
    *at += len;
    usize::try_from(v).map_err(|_| Malformed)
}

/// The worker a connection ID of this process names.
fn worker_of(cid: &[u8]) -> usize {
    usize::from(u16::from_be_bytes([cid[0] ^ cid[2], cid[1] ^ cid[3]]))
}

/// Connection IDs naming one worker (quinn asks its endpoint's generator for each).
#[derive(Debug)]
pub struct WorkerCids {
    tag: [u8; 2],
    random: ring::rand::SystemRandom,
}

impl WorkerCids {
    /// IDs for worker `tid` (`nbthread` is at most 1,024: two bytes name any worker).
    pub fn new(tid: usize) -> WorkerCids {
        WorkerCids {
            tag: u16::try_from(tid).unwrap_or(u16::MAX).to_be_bytes(),
            random: ring::rand::SystemRandom::new(),
        }
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut id = [0u8; CID_LEN];
        // The system's randomness does not fail on Linux once booted; were it to, IDs
        // would still differ (if less unpredictably), which quinn needs to make new ones.
        if ring::rand::SecureRandom::fill(&self.random, &mut id).is_err() {
            id = fastrand::u64(..).to_le_bytes();
        }
        id[0] = self.tag[0] ^ id[2];
        id[1] = self.tag[1] ^ id[3];
        ConnectionId::new(&id)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn short(cid: &[u8]) -> Vec<u8> {
        let mut d = vec![0x40];
        d.extend_from_slice(cid);
        d.resize(1 + CID_LEN + MIN_PROTECTED, 0xaa);
        d
    }

    fn long(kind: u8, dcid: &[u8], datagram: usize) -> Vec<u8> {
        let mut d = vec![0xc0 | (kind << 4), 0, 0, 0, 1, dcid.len() as u8];
        d.extend_from_slice(dcid);
        d.extend_from_slice(&[4, 1, 2, 3, 4]);
        if kind == 0 {
            d.push(0); // no token
        }
        let rest = datagram - d.len() - 2;
        d.extend_from_slice(&[0x40 | (rest >> 8) as u8, rest as u8]);
        d.resize(datagram, 0);
        d
    }

    #[test]
    fn ids_name_their_worker() {
        for tid in [0, 1, 7, 255, 1023] {
            let mut g = WorkerCids::new(tid);
            let a = g.generate_cid();
            let b = g.generate_cid();
            assert_ne!(a, b);
            assert_eq!(addressee(&short(&a)), Ok(Some(tid)));
            assert_eq!(addressee(&long(2, &b, 60)), Ok(Some(tid)));
        }
    }

    #[test]
    fn varints_of_every_length() {
        // RFC 9000's own examples (A.1).
        let cases: [(&[u8], usize); 4] = [
            (&[0x25], 37),
            (&[0x7b, 0xbd], 15_293),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
        ];
        for (bytes, want) in cases {
            let mut at = 0;
            assert_eq!(varint(bytes, &mut at), Ok(want));
            assert_eq!(at, bytes.len());
        }
        assert_eq!(varint(&[0x9d, 0x7f], &mut 0), Err(Malformed));
    }

    /// A receive's batch of datagrams at `stride`, sorted by worker 0 of two.
    #[test]
    fn batches_go_where_they_belong_and_malformed_ones_are_counted() {
        let routes = ListenerRoutes::default().get((0, 0), 2);
        let (t0, t1) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
        let (w0, w1) = (
            Route::new(routes.clone(), 0, t0.clone()),
            Route::new(routes, 1, t1.clone()),
        );
        let (mine, theirs) = (
            WorkerCids::new(0).generate_cid(),
            WorkerCids::new(1).generate_cid(),
        );
        let retry = long(3, &[1; 8], 40);
        let sort = |parts: &[&[u8]]| {
            let mut data: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            let mut meta = [RecvMeta::default()];
            meta[0].len = data.len();
            meta[0].stride = parts[0].len();
            w0.sort(&[io::IoSliceMut::new(&mut data)], &mut meta, 1);
            meta[0].len
        };
        // Three of worker 1's datagrams move together; nothing stays.
        let (a, b) = (short(&theirs), short(&theirs));
        assert_eq!(sort(&[&a, &b, &b]), 0);
        assert_eq!(t0.forwarded.load(Relaxed), 1);
        // A malformed datagram first: the batch is named by the next, here worker 0's own.
        let own = short(&mine);
        let mut padded = own.clone();
        padded.resize(retry.len(), 0);
        assert_eq!(sort(&[&retry, &padded]), retry.len() * 2);
        assert_eq!(t0.malformed.load(Relaxed), 1);
        // Nothing well-formed: the whole batch goes.
        assert_eq!(sort(&[&retry, &retry]), 0);
        assert_eq!(t0.malformed.load(Relaxed), 3);
        // Worker 1 receives what it was handed, as it came.
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut buf = vec![0u8; 4096];
        let mut meta = [RecvMeta::default()];
        let got = w1.poll_inbox(&mut cx, &mut [io::IoSliceMut::new(&mut buf)], &mut meta);
        assert_eq!(got, Poll::Ready(1));
        assert_eq!((meta[0].len, meta[0].stride), (a.len() * 3, a.len()));
        assert_eq!(&buf[..a.len()], &a[..]);
        assert_eq!(t1.held.load(Relaxed), 0);
    }

    /// An inbox holds at most INBOX_BYTES: past it datagrams are lost (counted), and what
    /// it holds is its worker's `held` until read or dropped with the inbox.
    #[test]
    fn an_inbox_holds_a_bounded_number_of_bytes() {
        let routes = ListenerRoutes::default().get((0, 0), 2);
        let (t0, t1) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
        let w0 = Route::new(routes.clone(), 0, t0.clone());
        let w1 = Route::new(routes, 1, t1.clone());
        let mut batch = short(&WorkerCids::new(1).generate_cid());
        batch.resize(60_000, 0);
        let mut sent = 0;
        for _ in 0..20 {
            let mut meta = [RecvMeta::default()];
            meta[0].len = batch.len();
            meta[0].stride = batch.len();
            w0.sort(&[io::IoSliceMut::new(&mut batch.clone())], &mut meta, 1);
            assert_eq!(meta[0].len, 0, "handed over or lost, never kept");
            sent += 1;
        }
        let fits = INBOX_BYTES / 60_000;
        assert_eq!(t0.forwarded.load(Relaxed), fits);
        assert_eq!(t0.lost.load(Relaxed), sent - fits);
        assert_eq!(t1.held.load(Relaxed), fits * 60_000);
        drop(w1);
        assert_eq!(t1.held.load(Relaxed), 0);
    }

    #[test]
    fn what_is_no_quic_packet_is_told() {
        assert_eq!(addressee(&[]), Err(Malformed));
        assert_eq!(addressee(&[0x40; 20]), Err(Malformed));
        // A stateless reset's least, 21 bytes, is the endpoint's to judge.
        assert!(addressee(&[0x40; 21]).is_ok());
        // An Initial in a datagram under 1,200 bytes, or with a length past its end.
        assert_eq!(addressee(&long(0, &[1; 8], 1199)), Err(Malformed));
        assert_eq!(addressee(&long(0, &[1; 8], 1200)).map(|_| ()), Ok(()));
        let mut bad = long(2, &[1; 8], 60);
        bad.truncate(40);
        assert_eq!(addressee(&bad), Err(Malformed));
        // A Retry, an ID over 20 bytes.
        assert_eq!(addressee(&long(3, &[1; 8], 60)), Err(Malformed));
        assert_eq!(addressee(&long(2, &[1; 21], 80)), Err(Malformed));
        // A client's own ID of another length names no worker.
        assert_eq!(addressee(&long(0, &[1; 12], 1200)), Ok(None));
        // Another version is the endpoint's to answer.
        let mut v2 = long(0, &[1; 8], 1200);
        v2[4] = 2;
        assert_eq!(addressee(&v2), Ok(None));
    }
}
