//! Framing of the Pulsar binary protocol on one connection: the `pulsar` crate's codec (command,
//! payload, CRC32C checksum), behind a size check.
//!
//! Owns nothing but the limit. Must never buffer a frame larger than [`MAX_FRAME`]: a frame's
//! declared size is checked before a byte of it is awaited, so a client cannot make the broker
//! hold an unbounded buffer.

use bytes::BytesMut;
use pulsar::message::{Codec, Message};
use tokio_util::codec::{Decoder, Encoder};

/// The largest message a client may send (Pulsar's default `maxMessageSize`, 5 MiB), announced
/// in `CONNECTED`.
pub const MAX_MESSAGE_SIZE: usize = 5 * 1024 * 1024;

/// The largest frame accepted: a message plus room for its command and metadata.
pub const MAX_FRAME: usize = MAX_MESSAGE_SIZE + 64 * 1024;

/// Why a connection's input could not be read.
#[derive(Debug)]
pub enum FrameError {
    /// The socket failed.
    Io(std::io::Error),
    /// The bytes are not a frame: a size out of bounds, a command or payload that does not
    /// parse, a checksum that does not match.
    Bad(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "connection failed: {e}"),
            Self::Bad(why) => write!(f, "bad frame: {why}"),
        }
    }
}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// The codec of a broker connection.
pub struct BrokerCodec(Codec);

impl BrokerCodec {
    /// A codec for a new connection.
    pub fn new() -> Self {
        Self(Codec)
    }
}

impl Decoder for BrokerCodec {
    type Item = Message;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, FrameError> {
        let Some(size) = src.first_chunk::<4>() else {
            return Ok(None);
        };
        let size = u32::from_be_bytes(*size) as usize;
        // A frame holds at least the command size field; the total size excludes itself.
        if !(4..=MAX_FRAME).contains(&size) {
            return Err(FrameError::Bad(format!(
                "frame size {size} outside 4..={MAX_FRAME}"
            )));
        }
        if src.len() < size + 4 {
            src.reserve(size + 4 - src.len());
            return Ok(None);
        }
        let command_size = src
            .get(4..8)
            .and_then(|b| b.first_chunk::<4>())
            .map_or(0, |b| u32::from_be_bytes(*b) as usize);
        if command_size > size - 4 {
            return Err(FrameError::Bad(format!(
                "command size {command_size} beyond its frame of {size} bytes"
            )));
        }
        // The whole frame is buffered: the codec either returns it or an error.
        match self.0.decode(src) {
            Ok(Some(m)) => Ok(Some(m)),
            Ok(None) => Err(FrameError::Bad("truncated frame".into())),
            Err(e) => Err(FrameError::Bad(e.to_string())),
        }
    }
}

impl Encoder<Message> for BrokerCodec {
    type Error = FrameError;

    fn encode(&mut self, item: Message, dst: &mut BytesMut) -> Result<(), FrameError> {
        self.0
            .encode(item, dst)
            .map_err(|e| FrameError::Bad(e.to_string()))
    }
}
