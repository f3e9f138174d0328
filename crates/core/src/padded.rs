//! A value alone on its pair of cache lines, so that what one worker writes never shares a
//! line with what another writes (adjacent-line prefetch makes the pair the unit).

/// `T` aligned to 128 bytes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
