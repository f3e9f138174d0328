//! Reading wire formats (TLS records, MQTT packets, ...) from a byte slice, big-endian:
//! each read takes from the front, and a read past the end yields `None` and takes
//! nothing. The one cursor the protocol dissectors share.

/// A byte slice read from the front.
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a>(pub &'a [u8]);

impl<'a> Cursor<'a> {
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = tail;
        Some(head)
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A vector with a length prefix of `width` bytes (1, else 2).
    pub fn vec(&mut self, width: usize) -> Option<&'a [u8]> {
        let n = match width {
            1 => usize::from(self.u8()?),
            _ => usize::from(self.u16()?),
        };
        self.take(n)
    }

    /// What is left.
    pub fn rest(&self) -> &'a [u8] {
        self.0
    }
}
