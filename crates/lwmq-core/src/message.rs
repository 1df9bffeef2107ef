//! Messages: one or more frames, made independently of any channel, immutable once built.
//! A frame is a `Bytes`: a reference-counted view that may point into a transport buffer (zero-copy
//! receive); the buffer goes back to its pool when the last view is dropped.

use bytes::Bytes;
use smallvec::SmallVec;

/// Frames inline: most messages have one or two, and decoding a buffer then allocates nothing per message.
pub type Frames = SmallVec<[Bytes; 2]>;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    frames: Frames,
}

impl Message {
    /// A message of the given frames. An empty frame list is allowed here and rejected at post time
    /// (a message has at least one frame on the wire).
    pub fn new(frames: impl Into<Frames>) -> Self {
        Message { frames: frames.into() }
    }

    pub fn single(frame: impl Into<Bytes>) -> Self {
        let mut frames = Frames::new();
        frames.push(frame.into());
        Message { frames }
    }

    pub fn frames(&self) -> &[Bytes] {
        &self.frames
    }

    pub fn into_frames(self) -> Frames {
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
