//! [`host_key`]: the address a peer or client is counted under, so that one host cannot
//! pose as many. Shared by the p2p handshake gate, the RPC connection table and the
//! mempool's per-subnet budgets.

use std::net::IpAddr;

/// The address one host is counted under: an IPv4 address as is (IPv4-mapped IPv6 too,
/// as its IPv4 address), an IPv6 address by its /64 (the rest zeroed), which one host
/// usually holds whole.
pub fn host_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                IpAddr::V6(s.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> IpAddr {
        host_key(s.parse().unwrap())
    }

    #[test]
    fn ipv6_hosts_are_keyed_by_their_64() {
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:bbbb::9"));
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2::"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(
            key("2001:db8:1:2:ffff:ffff:ffff:ffff"),
            "2001:db8:1:2::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(key("::1"), "::".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn ipv4_is_kept_whole_and_mapped_ipv6_is_ipv4() {
        assert_eq!(key("10.1.2.3"), "10.1.2.3".parse::<IpAddr>().unwrap());
        assert_ne!(key("10.1.2.3"), key("10.1.2.4"));
        assert_eq!(key("::ffff:10.1.2.3"), key("10.1.2.3"));
    }
}
