//! Messages: one or more frames, made independently of any channel, immutable once built.
//! A frame is a `Bytes`: a reference-counted view that may point into a transport buffer (zero-copy
//! receive); the buffer goes back to its pool when the last view is dropped.

use bytes::Bytes;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    frames: Vec<Bytes>,
}

impl Message {
    /// A message of the given frames. An empty frame list is allowed here and rejected at post time
    /// (a message has at least one frame on the wire).
    pub fn new(frames: Vec<Bytes>) -> Self {
        Message { frames }
    }

    pub fn single(frame: impl Into<Bytes>) -> Self {
        Message { frames: vec![frame.into()] }
    }

    pub fn frames(&self) -> &[Bytes] {
        &self.frames
    }

    pub fn into_frames(self) -> Vec<Bytes> {
        self.frames
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Total payload bytes over all frames.
    pub fn nbytes(&self) -> usize {
        self.frames.iter().map(Bytes::len).sum()
    }
}

impl<B: Into<Bytes>> FromIterator<B> for Message {
    fn from_iter<I: IntoIterator<Item = B>>(iter: I) -> Self {
        Message { frames: iter.into_iter().map(Into::into).collect() }
    }
}
