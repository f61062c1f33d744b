//! `--metrics-address [HOST:]PORT`: where `/metrics` is served. A port alone means
//! 127.0.0.1 (metrics say what a mount reads and how much; they stay on the machine unless
//! asked); an address beyond loopback needs `--metrics-allow-remote`. The port is bound
//! before the mount goes live, so a taken port fails the mount instead of a silent endpoint.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, ToSocketAddrs};

/// The address `text` names, refused beyond loopback unless `allow_remote`.
pub fn parse(text: &str, allow_remote: bool) -> Result<SocketAddr, String> {
    let text = text.trim();
    let addr = match text.parse::<u16>() {
        Ok(port) => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        Err(_) => match text.parse::<SocketAddr>() {
            Ok(addr) => addr,
            Err(_) => resolve(text)?,
        },
    };
    if !allow_remote && !addr.ip().is_loopback() {
        return Err(format!(
            "--metrics-address {text}: {} is not a loopback address; add --metrics-allow-remote to serve \
             metrics beyond this machine",
            addr.ip()
        ));
    }
    Ok(addr)
}

/// `HOST:PORT` with a host name (e.g. `localhost:9464`), its first address.
fn resolve(text: &str) -> Result<SocketAddr, String> {
    let invalid = || format!("--metrics-address {text}: expected PORT or HOST:PORT (e.g. 9464 or 0.0.0.0:9464)");
    let (host, port) = text.rsplit_once(':').ok_or_else(invalid)?;
    let port: u16 = port.parse().map_err(|_| invalid())?;
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("--metrics-address {text}: {e}"))?
        .next()
        .ok_or_else(invalid)
}

/// Bind the metrics port now (before the mount goes live).
pub fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    let listener = TcpListener::bind(addr).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            format!("cannot serve metrics on {addr}: the port is taken (another mount or program); name another with --metrics-address")
        }
        _ => format!("cannot serve metrics on {addr}: {e}"),
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_alone_is_loopback() {
        assert_eq!(parse("9464", false).unwrap(), "127.0.0.1:9464".parse().unwrap());
        assert_eq!(parse("127.0.0.1:80", false).unwrap(), "127.0.0.1:80".parse().unwrap());
        assert_eq!(parse("[::1]:9464", false).unwrap(), "[::1]:9464".parse().unwrap());
        assert!(parse("localhost:9464", false).unwrap().ip().is_loopback());
    }

    #[test]
    fn beyond_loopback_needs_the_flag() {
        let refused = parse("0.0.0.0:9464", false).unwrap_err();
        assert!(
            refused.contains("not a loopback address") && refused.contains("--metrics-allow-remote"),
            "{refused}"
        );
        assert!(parse("[::]:9464", false).is_err());
        assert_eq!(parse("0.0.0.0:9464", true).unwrap(), "0.0.0.0:9464".parse().unwrap());
        for bad in ["", "host", "1.2.3.4:port", "70000"] {
            assert!(parse(bad, true).unwrap_err().contains("--metrics-address"), "{bad}");
        }
    }

    #[test]
    fn a_taken_port_is_refused_clearly() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let refused = bind(addr).unwrap_err();
        assert!(
            refused.contains(&addr.to_string()) && refused.contains("taken"),
            "{refused}"
        );
        drop(taken);
        assert!(bind(addr).is_ok(), "free again");
    }
}
