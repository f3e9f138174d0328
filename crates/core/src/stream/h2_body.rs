//! Message bodies between an HTTP/2 stream and the HTTP/1.1 bytes of a pipe, both ways, for
//! HTTP/2 towards servers (`h2_server`): a request's body from the transaction to the
//! server's stream, the response's from the stream back.
//!
//! Invariants:
//! - DATA is sent only as the peer's flow control allows, and credit is given back for
//!   received DATA only once the pipe took it: a slow side slows the other, nothing piles up.
//! - An HTTP/1.1 body without a length goes chunked, so trailers cross both ways.

use bytes::Bytes;
use h2::{Reason, RecvStream, SendStream};
use sluice_http::Framing;

use super::heads::push_header;
use crate::h2_stream::BodyReader;
use crate::pipe::Front;

/// Why a stream ended before its message was complete.
#[derive(Debug)]
pub(super) enum Ended {
    /// The peer reset it (or its connection went away), or the pipe's other side left.
    Reset,
    /// The HTTP/1.1 side ended without a complete message.
    Truncated,
}

/// Writes an HTTP/1.1 head, then the stream's body after it (chunked when `chunked`, with
/// the trailers), and ends the pipe's direction.
pub(super) async fn into_pipe(
    front: &Front,
    head: &[u8],
    mut body: RecvStream,
    chunked: bool,
) -> Result<(), Ended> {
    let gone = |_| Ended::Reset;
    front.write_all(head).await.map_err(gone)?;
    let mut frame = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.map_err(|_| Ended::Reset)?;
        let n = data.len();
        if chunked && n > 0 {
            frame.clear();
            sluice_http::push_chunk_header(&mut frame, n);
            front.write_all(&frame).await.map_err(gone)?;
        }
        front.write_all(&data).await.map_err(gone)?;
        if chunked && n > 0 {
            front.write_all(b"\r\n").await.map_err(gone)?;
        }
        let _ = body.flow_control().release_capacity(n);
    }
    if chunked {
        let trailers = body.trailers().await.map_err(|_| Ended::Reset)?;
        let mut end = b"0\r\n".to_vec();
        for (name, value) in trailers.iter().flatten() {
            push_header(&mut end, name.as_str().as_bytes(), value.as_bytes());
        }
        end.extend_from_slice(b"\r\n");
        front.write_all(&end).await.map_err(gone)?;
    }
    front.finish();
    Ok(())
}

/// Sends the HTTP/1.1 body framed as `framing` (its first bytes in `bytes`, the rest still
/// to come from the pipe) as DATA on `send`, then its trailers, ending the stream.
pub(super) async fn from_pipe(
    front: &Front,
    send: &mut SendStream<Bytes>,
    mut bytes: Bytes,
    framing: Framing,
) -> Result<(), Ended> {
    let mut body = BodyReader::new(framing);
    let mut more = Vec::new();
    loop {
        let (data, done) = body.take(&mut bytes).map_err(|_| Ended::Truncated)?;
        if done {
            let trailers = body.trailers();
            let last_data = trailers.is_none();
            send_data(send, data, last_data).await?;
            if let Some(t) = trailers {
                send.send_trailers(t).map_err(|_| Ended::Reset)?;
            }
            return Ok(());
        }
        send_data(send, data, false).await?;
        let got = tokio::select! {
            got = front.read(&mut more) => got,
            _ = std::future::poll_fn(|cx| send.poll_reset(cx)) => return Err(Ended::Reset),
        };
        if got.map_err(|_| Ended::Truncated)? == 0 {
            if body.framing == Framing::UntilClose {
                send_data(send, Bytes::new(), true).await?;
                return Ok(());
            }
            send.send_reset(Reason::INTERNAL_ERROR);
            return Err(Ended::Truncated);
        }
        bytes = if bytes.is_empty() {
            std::mem::take(&mut more).into()
        } else {
            // A part of a chunk header was left over: it goes in front of what came.
            let mut joined = Vec::with_capacity(bytes.len() + more.len());
            joined.extend_from_slice(&bytes);
            joined.append(&mut more);
            joined.into()
        };
    }
}

/// Sends `data` as the peer's flow control allows.
async fn send_data(send: &mut SendStream<Bytes>, mut data: Bytes, end: bool) -> Result<(), Ended> {
    if data.is_empty() {
        if end {
            send.send_data(data, true).map_err(|_| Ended::Reset)?;
        }
        return Ok(());
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let room = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            _ => return Err(Ended::Reset),
        };
        if room == 0 {
            continue;
        }
        let part = data.split_to(room.min(data.len()));
        send.send_data(part, end && data.is_empty())
            .map_err(|_| Ended::Reset)?;
    }
    Ok(())
}
