//! `REVERB_TCP_IFACE`: the IPv4 address of a named network interface (getifaddrs).

use std::ffi::CStr;
use std::net::Ipv4Addr;

use crate::error::{Result, TransportError};

/// The first IPv4 address of interface `name`.
pub(crate) fn ipv4_of(name: &str) -> Result<Ipv4Addr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(TransportError::io("tcp: list network interfaces", std::io::Error::last_os_error()));
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() && found.is_none() {
        // SAFETY: `at` is a node of the list getifaddrs returned, alive until freeifaddrs;
        // ifa_name is a NUL-terminated string and an AF_INET ifa_addr is a sockaddr_in.
        unsafe {
            let ifa = &*at;
            let addr = ifa.ifa_addr;
            if !addr.is_null()
                && i32::from((*addr).sa_family) == libc::AF_INET
                && CStr::from_ptr(ifa.ifa_name).to_bytes() == name.as_bytes()
            {
                let sin = &*(addr as *const libc::sockaddr_in);
                found = Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
            at = ifa.ifa_next;
        }
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found.ok_or_else(|| {
        TransportError::Config(format!("REVERB_TCP_IFACE={name}: no such interface with an IPv4 address"))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_interface_has_127_0_0_1() {
        assert_eq!(super::ipv4_of("lo").unwrap(), std::net::Ipv4Addr::LOCALHOST);
        assert!(super::ipv4_of("no-such-iface0").is_err());
    }
}
