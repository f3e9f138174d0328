//! The transport seam: every client and server connection reaches the data path as a
//! [`Conn`], whatever carries its bytes: a [`Socket`] (plain TCP or unix, or TLS over it:
//! rustls, driven here by the same readiness and non-blocking reads and writes, so the
//! HTTP and relay code is unchanged), or one stream of a multiplexed HTTP/2 connection
//! (`conn`), or a client's HTTP/3 request stream (`mux`).
//!
//! Invariants:
//! - A `Socket` is registered with the event loop of the worker that created or attached it,
//!   and is used only there. Moving it to another worker goes through [`Socket::detach`] (on
//!   the sender) and [`Socket::attach`] (on the receiver).
//! - Every `Socket` holds one slot of the open-descriptor count (`fds`) for its whole life,
//!   so no socket can be forgotten by the pools' descriptor rules.
//! - `MSG_MORE` is only ever set by the caller's [`Then`] hint, which must mean "the next
//!   bytes of this message are already in hand" or "the connection is shut down at once":
//!   a hint given while waiting on a peer would hold sent bytes in the kernel for up to
//!   200 ms (and TLS records for good).

mod conn;
mod mux;
pub mod quic_route;
pub mod quic_socket;
mod socket;
pub mod sockopt;
pub mod splice;

pub use self::conn::Conn;
pub use self::mux::Mux;
pub use self::socket::{Detached, Origin, Socket, TcpInfo, Then, TlsInfo};
