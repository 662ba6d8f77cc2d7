//! The provider's endpoint names (`fi_getname`, `fi_av_insert`): every name has one length,
//! as libfabric wants, whatever carries the endpoint. A name is the carrier, the length of
//! the transport's address, then that address, zero-padded.

use reverb_transport::config::{parse::parse_enum, Env};
use reverb_transport::error::TransportError;

use crate::error::Result;

/// Bytes of every name.
pub const NAME_LEN: usize = 48;

/// What carries the provider's endpoints (`REVERB_OFI_PROVIDER`, else `FI_REVERB_PROVIDER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// reverb's shm provider: the endpoints of this user on this host.
    Shm = 1,
    /// reverb's tcp provider: endpoints on any host.
    Tcp = 2,
}

const CHOICES: [(&str, Carrier); 2] = [("shm", Carrier::Shm), ("tcp", Carrier::Tcp)];
const WHAT: &str = "reverb endpoint name";

impl Carrier {
    /// The carrier this process's endpoints use; shm by default.
    pub fn from_env() -> Result<Carrier> {
        let env = Env::process();
        if let Some(c) = env.choice("REVERB_OFI_PROVIDER", &CHOICES).map_err(TransportError::from)? {
            return Ok(c);
        }
        match env.foreign("FI_REVERB_PROVIDER") {
            Some(v) => parse_enum(&v, &CHOICES)
                .map_err(|e| TransportError::Config(format!("FI_REVERB_PROVIDER={v:?}: {e}")).into()),
            None => Ok(Carrier::Shm),
        }
    }
}

/// The name of an endpoint `carrier` carries at transport address `address`.
pub fn encode(carrier: Carrier, address: &[u8]) -> Result<Vec<u8>> {
    if address.len() > NAME_LEN - 2 {
        let detail = format!("a {}-byte transport address", address.len());
        return Err(TransportError::Malformed { what: WHAT, detail }.into());
    }
    let mut out = vec![carrier as u8, address.len() as u8];
    out.extend_from_slice(address);
    out.resize(NAME_LEN, 0);
    Ok(out)
}

/// The transport address in `name`, from untrusted bytes; `Malformed` when it is no name, or
/// one of an endpoint that another carrier than `carrier` carries.
pub fn decode(carrier: Carrier, name: &[u8]) -> Result<&[u8]> {
    let malformed = |detail: String| TransportError::Malformed { what: WHAT, detail }.into();
    if name.len() != NAME_LEN {
        return Err(malformed(format!("{} bytes, expected {NAME_LEN}", name.len())));
    }
    if name[0] != carrier as u8 {
        return Err(malformed(format!("carrier {} where this endpoint's is {:?}", name[0], carrier)));
    }
    let len = name[1] as usize;
    name.get(2..2 + len).ok_or_else(|| malformed(format!("an address of {len} bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_junk_is_refused() {
        let name = encode(Carrier::Tcp, b"address").unwrap();
        assert_eq!(name.len(), NAME_LEN);
        assert_eq!(decode(Carrier::Tcp, &name).unwrap(), b"address");
        assert!(decode(Carrier::Shm, &name).is_err(), "another carrier's name");
        assert!(decode(Carrier::Tcp, b"junk").is_err());
        let mut long = name.clone();
        long[1] = 255;
        assert!(decode(Carrier::Tcp, &long).is_err());
        assert!(encode(Carrier::Shm, &[0; NAME_LEN]).is_err());
    }
}
