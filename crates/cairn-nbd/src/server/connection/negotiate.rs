//! The handshake, from the greeting to the start of transmission (or the
//! client's leaving), with STARTTLS upgrading the transport in place.

use std::io::{self, BufReader, Read, Write};

use crate::codec::handshake::{
    self, Negotiation, OPTION_HEADER_LEN, OptionHeader, Outcome, Session,
};
use crate::server::Inner;
use crate::server::transport::{self, Reader, Writer};

/// The handshake: `Ok(None)` when the client aborted or left. A STARTTLS
/// upgrades `reader` and `writer` in place.
pub(super) fn negotiate<R: Read, W: Write>(
    inner: &Inner,
    reader: &mut BufReader<Reader<R>>,
    writer: &mut Writer<W>,
    peer: &str,
) -> io::Result<Option<Session>> {
    writer.write_all(&handshake::greeting())?;
    writer.flush()?;
    let mut flags = [0u8; 4];
    if !read_or_eof(reader, &mut flags)? {
        return Ok(None);
    }
    let client = handshake::parse_client_flags(flags).map_err(io::Error::other)?;
    let mut negotiation = Negotiation::with_tls(client, inner.tls_mode);
    let mut data = Vec::new();
    let mut out = Vec::new();
    loop {
        let mut header = [0u8; OPTION_HEADER_LEN];
        if !read_or_eof(reader, &mut header)? {
            return Ok(None);
        }
        let header = OptionHeader::parse(&header).map_err(io::Error::other)?;
        data.resize(header.length as usize, 0);
        reader.read_exact(&mut data)?;
        out.clear();
        let outcome = negotiation.handle(header, &data, &inner.infos, &mut out);
        writer.write_all(&out)?;
        writer.flush()?;
        match outcome {
            Outcome::Continue => {}
            Outcome::Abort => return Ok(None),
            Outcome::Transmission(session) => return Ok(Some(session)),
            Outcome::Disconnect(e) => return Err(io::Error::other(e)),
            Outcome::StartTls => {
                let Some(config) = inner.tls_server() else {
                    return Err(io::Error::other("STARTTLS accepted without credentials"));
                };
                transport::start_tls(&config, reader, writer)?;
                negotiation.tls_established();
                tracing::debug!(peer, "TLS established");
            }
        }
    }
}

/// Fill `buf`; `Ok(false)` on a clean end of file before its first byte.
pub(super) fn read_or_eof<R: Read>(reader: &mut R, buf: &mut [u8]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("truncated frame: {filled} of {} bytes", buf.len()),
                ));
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
