//! Client addresses behind proxies: CIDR networks, and the walk of
//! `X-Forwarded-For` that finds the client without trusting what a client
//! could have written.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 network, `10.0.0.0/8` or `2001:db8::/32`; a bare
/// address is a network of one. Host bits are cleared when parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    addr: IpAddr,
    bits: u8,
}

impl IpNet {
    /// Whether `ip` is inside; an IPv4-mapped IPv6 address counts as IPv4.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => mask_v4(ip, self.bits) == net,
            (IpAddr::V6(net), IpAddr::V6(ip)) => mask_v6(ip, self.bits) == net,
            _ => false,
        }
    }
}

impl FromStr for IpNet {
    type Err = String;

    fn from_str(s: &str) -> Result<IpNet, String> {
        let (addr, bits) = match s.split_once('/') {
            Some((addr, bits)) => (addr, Some(bits)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR network"))?;
        let width = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => width,
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= width)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {width}"))?,
        };
        // Addresses are compared as IPv4 when mapped, so a mapped network
        // is the IPv4 network it covers.
        let (addr, bits) = match canonical(addr) {
            IpAddr::V4(v4) if addr.is_ipv6() => {
                let bits = bits.checked_sub(96).ok_or_else(|| {
                    format!("{s:?}: an IPv4-mapped network needs a prefix of 96 to 128; write the IPv4 network")
                })?;
                (IpAddr::V4(v4), bits)
            }
            same => (same, bits),
        };
        Ok(IpNet {
            addr: network(addr, bits),
            bits,
        })
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:1.2.3.4`, what a dual-stack socket
/// reports for an IPv4 client) as the IPv4 address it is; others unchanged.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// `ip`'s network of `bits` bits (clamped to the family's width), as
/// `203.0.113.0/24`.
pub fn network_of(ip: IpAddr, bits: u8) -> String {
    let ip = canonical(ip);
    let bits = bits.min(if ip.is_ipv4() { 32 } else { 128 });
    format!("{}/{bits}", network(ip, bits))
}

fn network(ip: IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(mask_v4(v4, bits)),
        IpAddr::V6(v6) => IpAddr::V6(mask_v6(v6, bits)),
    }
}

fn mask_v4(ip: Ipv4Addr, bits: u8) -> Ipv4Addr {
    let mask = u32::MAX
        .checked_shl(32 - u32::from(bits.min(32)))
        .unwrap_or(0);
    Ipv4Addr::from(u32::from(ip) & mask)
}

fn mask_v6(ip: Ipv6Addr, bits: u8) -> Ipv6Addr {
    let mask = u128::MAX
        .checked_shl(128 - u32::from(bits.min(128)))
        .unwrap_or(0);
    Ipv6Addr::from(u128::from(ip) & mask)
}

/// The client's address.
///
/// The socket peer, unless it is a trusted proxy. Then the hops of every
/// `X-Forwarded-For` header (in order, comma lists split) are walked from
/// the right, skipping trusted proxies: the first hop that is not one is
/// the client. A hop that does not parse stops the walk: whoever wrote it
/// is not trusted, so nothing left of it is either, and the answer is the
/// last address a trusted proxy vouched for. Without any usable
/// `X-Forwarded-For` hop, a trusted peer's `X-Real-IP` is used, then the
/// peer itself. A client that sends these headers straight to us (an
/// untrusted peer) changes nothing.
pub fn client_ip(
    peer: IpAddr,
    trusted: &[IpNet],
    forwarded_for: &[&str],
    real_ip: Option<&str>,
) -> IpAddr {
    let peer = canonical(peer);
    let is_trusted = |ip: IpAddr| trusted.iter().any(|net| net.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    let hops = forwarded_for
        .iter()
        .rev()
        .flat_map(|header| header.rsplit(','))
        .map(str::trim)
        .filter(|hop| !hop.is_empty());
    let mut vouched = peer;
    let mut walked = false;
    for hop in hops {
        walked = true;
        let Some(ip) = parse_hop(hop) else {
            return vouched;
        };
        if !is_trusted(ip) {
            return ip;
        }
        vouched = ip;
    }
    if !walked && let Some(ip) = real_ip.and_then(|v| parse_hop(v.trim())) {
        return ip;
    }
    vouched
}

/// One hop: an address, also as `[v6]`, `v4:port` or `[v6]:port`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Some(rest) = hop.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || valid_port(after.strip_prefix(':')?)) {
            return None;
        }
        return inside
            .parse::<Ipv6Addr>()
            .ok()
            .map(|v6| canonical(v6.into()));
    }
    let (addr, port) = hop.split_once(':')?;
    if !valid_port(port) {
        return None;
    }
    addr.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

fn valid_port(port: &str) -> bool {
    !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn networks_parse_and_contain() {
        let net: IpNet = "10.1.2.3/8".parse().unwrap();
        assert_eq!(net.to_string(), "10.0.0.0/8");
        assert!(net.contains(ip("10.255.0.1")));
        assert!(net.contains(ip("::ffff:10.0.0.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        let one: IpNet = "127.0.0.1".parse().unwrap();
        assert_eq!(one.to_string(), "127.0.0.1/32");
        let v6: IpNet = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:1::5")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let all: IpNet = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("8.8.8.8")));
        let mapped: IpNet = "::ffff:192.168.0.0/112".parse().unwrap();
        assert!(
            mapped.to_string().starts_with("::ffff:192.168.0.0/")
                || mapped.contains(ip("::ffff:192.168.0.1"))
        );
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "x/8",
            "10.0.0.0/-1",
            "10.0.0.0/",
        ] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
        }
    }

    #[test]
    fn networks_of_clients() {
        assert_eq!(network_of(ip("203.0.113.77"), 24), "203.0.113.0/24");
        assert_eq!(network_of(ip("::ffff:203.0.113.77"), 24), "203.0.113.0/24");
        assert_eq!(network_of(ip("203.0.113.77"), 64), "203.0.113.77/32");
        assert_eq!(network_of(ip("2001:db8:1:2:3::9"), 64), "2001:db8:1:2::/64");
        assert_eq!(network_of(ip("2001:db8::1"), 0), "::/0");
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let trusted = nets(&["10.0.0.0/8"]);
        let got = client_ip(ip("198.51.100.9"), &trusted, &["1.2.3.4"], Some("5.6.7.8"));
        assert_eq!(got, ip("198.51.100.9"));
        // No trusted proxies at all: headers never count.
        assert_eq!(
            client_ip(ip("10.0.0.1"), &[], &["1.2.3.4"], None),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let trusted = nets(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
        let peer = ip("10.0.0.1");
        // The client forged the leftmost hop; the proxies appended the rest.
        let got = client_ip(peer, &trusted, &["6.6.6.6, 203.0.113.5, 10.0.0.7"], None);
        assert_eq!(got, ip("203.0.113.5"));
        // Several headers are one list, in order.
        let got = client_ip(
            peer,
            &trusted,
            &["6.6.6.6", "203.0.113.5,10.0.0.7", "10.0.0.8"],
            None,
        );
        assert_eq!(got, ip("203.0.113.5"));
        // IPv6 and IPv4-mapped hops; ports and brackets.
        let got = client_ip(peer, &trusted, &["2001:db8::42, 2001:db8:ffff::1"], None);
        assert_eq!(got, ip("2001:db8::42"));
        let got = client_ip(peer, &trusted, &["[2001:db8::43]:4711"], None);
        assert_eq!(got, ip("2001:db8::43"));
        let got = client_ip(
            peer,
            &trusted,
            &["::ffff:203.0.113.9, ::ffff:10.1.1.1"],
            None,
        );
        assert_eq!(got, ip("203.0.113.9"));
        let got = client_ip(peer, &trusted, &["203.0.113.10:1234"], None);
        assert_eq!(got, ip("203.0.113.10"));
        // A mapped peer is trusted as its IPv4 self.
        let got = client_ip(ip("::ffff:10.0.0.1"), &trusted, &["203.0.113.5"], None);
        assert_eq!(got, ip("203.0.113.5"));
    }

    #[test]
    fn garbage_stops_the_walk_at_the_last_vouched_address() {
        let trusted = nets(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.1");
        // Written by whoever sits left of 10.0.0.7: not to be believed.
        let got = client_ip(peer, &trusted, &["1.2.3.4, garbage, 10.0.0.7"], None);
        assert_eq!(got, ip("10.0.0.7"));
        let got = client_ip(peer, &trusted, &["1.2.3.4, unknown"], None);
        assert_eq!(got, peer);
        // Nor does X-Real-IP rescue a garbage walk.
        let got = client_ip(peer, &trusted, &["nonsense"], Some("1.2.3.4"));
        assert_eq!(got, peer);
        // Empty items are no hops.
        let got = client_ip(peer, &trusted, &[" , 203.0.113.5 ,, "], None);
        assert_eq!(got, ip("203.0.113.5"));
        for bad in ["1.2.3.4:", "1.2.3.4:99999x", "[::1", "[::1]x", "::1:80x"] {
            assert_eq!(client_ip(peer, &trusted, &[bad], None), peer, "{bad}");
        }
    }

    #[test]
    fn every_hop_trusted_gives_the_leftmost_and_real_ip_is_a_fallback() {
        let trusted = nets(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.1");
        assert_eq!(
            client_ip(peer, &trusted, &["10.0.0.3, 10.0.0.2"], None),
            ip("10.0.0.3")
        );
        assert_eq!(
            client_ip(peer, &trusted, &[], Some("203.0.113.8")),
            ip("203.0.113.8")
        );
        assert_eq!(client_ip(peer, &trusted, &[], Some("bogus")), peer);
        assert_eq!(client_ip(peer, &trusted, &[], None), peer);
    }

    proptest::proptest! {
        /// Whatever the headers hold: an untrusted peer is the client, and
        /// behind a trusted one the answer is the peer, a hop of the headers
        /// or X-Real-IP; never a panic.
        #[test]
        fn headers_cannot_move_the_answer_off_the_chain(
            peer_octet in 0u8..=255,
            hops in proptest::collection::vec("[0-9a-f:.\\[\\] ,x]{0,24}", 0..5),
            real in proptest::option::of("[0-9.:]{0,16}"),
        ) {
            let trusted = nets(&["10.0.0.0/8"]);
            let headers: Vec<&str> = hops.iter().map(String::as_str).collect();
            let untrusted = IpAddr::from([192, 0, 2, peer_octet]);
            let got = client_ip(untrusted, &trusted, &headers, real.as_deref());
            proptest::prop_assert_eq!(got, untrusted);
            let peer = IpAddr::from([10, 0, 0, peer_octet]);
            let got = client_ip(peer, &trusted, &headers, real.as_deref());
            let written = headers.iter().flat_map(|h| h.split(',')).filter_map(|h| parse_hop(h.trim()));
            let from_real = real.as_deref().and_then(|r| parse_hop(r.trim()));
            proptest::prop_assert!(
                got == peer || written.clone().any(|w| w == got) || from_real == Some(got),
                "{got} from {headers:?} {real:?}"
            );
        }
    }
}
