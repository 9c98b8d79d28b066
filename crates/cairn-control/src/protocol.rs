//! The control socket's wire format: frames of a 4-byte little-endian
//! length and that many bytes of JSON, one request frame answered by one
//! reply frame, any number per connection.
//!
//! ```text
//! request:  {"request":"stats"}
//!           {"request":"ctl","export":"cairn","layer":null,"command":"flush"}
//!           {"request":"ctl","export":"cairn","layer":"tier","command":"mode","mode":"write-around"}
//! reply:    {"reply":"stats", ...Snapshot}
//!           {"reply":"done","lines":["cache: dropped 12 cached blocks (49152 bytes)"]}
//!           {"reply":"error","message":"..."}
//! ```
//!
//! A request that is not JSON, not a known request, or longer than
//! [`REQUEST_MAX_BYTES`] gets an `error` reply; after an oversized length
//! the connection is closed (its body is not read), after the others the
//! next frame is read as usual.

use std::io::{self, Read, Write};

use cairn_store::stats::LayerCommand;
use serde::{Deserialize, Serialize};

use crate::limits::REQUEST_MAX_BYTES;
use crate::snapshot::Snapshot;

/// What a client asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Every export's and layer's counters.
    Stats,
    /// A runtime command for an export's layers.
    Ctl {
        /// The export.
        export: String,
        /// One layer (its name in the spec), or every layer that supports
        /// the command.
        #[serde(default)]
        layer: Option<String>,
        /// What to do.
        #[serde(flatten)]
        command: LayerCommand,
    },
}

/// What the server answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// The counters.
    Stats(Box<Snapshot>),
    /// A command was carried out: one line per layer.
    Done {
        /// What was done.
        lines: Vec<String>,
    },
    /// The request was refused or failed; the connection stays usable
    /// unless the message says it is closed.
    Error {
        /// What went wrong, and what to do.
        message: String,
    },
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The peer closed the connection between frames.
    #[error("the connection closed")]
    Closed,
    /// The length prefix is over the limit; the body was not read.
    #[error("a frame of {length} bytes is over the limit of {limit} bytes")]
    TooLong {
        /// The length announced.
        length: u32,
        /// The limit.
        limit: u32,
    },
    /// Reading or writing failed (or the connection closed inside a frame).
    #[error("reading or writing a frame")]
    Io(#[from] io::Error),
}

/// Reads one frame's body into `body` (cleared first), refusing a length
/// over `limit` before reading it.
pub fn read_frame(
    reader: &mut impl Read,
    limit: u32,
    body: &mut Vec<u8>,
) -> Result<(), FrameError> {
    let mut length = [0u8; 4];
    match reader.read(&mut length[..1]) {
        Ok(0) => return Err(FrameError::Closed),
        Ok(_) => reader.read_exact(&mut length[1..])?,
        Err(e) => return Err(FrameError::Io(e)),
    }
    let length = u32::from_le_bytes(length);
    if length > limit {
        return Err(FrameError::TooLong { length, limit });
    }
    body.clear();
    body.resize(length as usize, 0);
    reader.read_exact(body)?;
    Ok(())
}

/// Writes `body` as one frame.
pub fn write_frame(writer: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let length = u32::try_from(body.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&length.to_le_bytes());
    frame.extend_from_slice(body);
    writer.write_all(&frame)?;
    writer.flush()
}

/// Parses a request frame's body; the error says what is wrong with it.
pub fn parse_request(body: &[u8]) -> Result<Request, String> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        format!("the request is not JSON ({e}); send {{\"request\":\"stats\"}} or a ctl request")
    })?;
    match value.get("request").and_then(serde_json::Value::as_str) {
        Some("stats" | "ctl") => {}
        Some(other) => {
            return Err(format!(
                "unknown request {other:?}: the requests are \"stats\" and \"ctl\""
            ));
        }
        None => return Err("the request has no \"request\" field (\"stats\" or \"ctl\")".into()),
    }
    serde_json::from_value(value).map_err(|e| format!("bad request: {e}"))
}

const _: () = assert!(REQUEST_MAX_BYTES >= 1024);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for request in [
            Request::Stats,
            Request::Ctl {
                export: "cairn".into(),
                layer: None,
                command: LayerCommand::DropClean,
            },
            Request::Ctl {
                export: "e".into(),
                layer: Some("tier".into()),
                command: LayerCommand::Mode {
                    mode: "write-around".into(),
                },
            },
        ] {
            let body = serde_json::to_vec(&request).unwrap();
            assert_eq!(parse_request(&body).unwrap(), request);
        }
        let flush = br#"{"request":"ctl","export":"cairn","command":"flush"}"#;
        assert!(matches!(
            parse_request(flush).unwrap(),
            Request::Ctl {
                command: LayerCommand::Flush,
                layer: None,
                ..
            }
        ));
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        assert!(
            parse_request(b"\x00garbage")
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(
            parse_request(br#"{"request":"reboot"}"#)
                .unwrap_err()
                .contains("unknown request \"reboot\"")
        );
        assert!(
            parse_request(br#"{"x":1}"#)
                .unwrap_err()
                .contains("no \"request\" field")
        );
        let bad = parse_request(br#"{"request":"ctl","export":"e","command":"explode"}"#);
        assert!(bad.unwrap_err().contains("explode"));
    }

    #[test]
    fn an_oversized_length_is_refused_unread() {
        let mut frame = (REQUEST_MAX_BYTES + 1).to_le_bytes().to_vec();
        frame.extend_from_slice(b"{}");
        let mut body = Vec::new();
        let got = read_frame(&mut &frame[..], REQUEST_MAX_BYTES, &mut body);
        assert!(matches!(got, Err(FrameError::TooLong { .. })), "{got:?}");
        assert!(matches!(
            read_frame(&mut &[][..], 10, &mut body),
            Err(FrameError::Closed)
        ));
    }
}
