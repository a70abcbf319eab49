//! Binding the AMQP listener. The default address `::` is one dual-stack socket that takes
//! IPv6 and IPv4 clients alike (IPv4 peers show up as `::ffff:a.b.c.d`), as RabbitMQ's
//! default listener does; where the host has no IPv6 it falls back to `0.0.0.0`.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tokio::net::TcpListener;

/// Pending connections the kernel queues before we accept them (RabbitMQ's tcp backlog).
const BACKLOG: i32 = 1024;

/// A listener on `bind:port`; `bind` is an IP address, `::` for dual-stack.
pub fn bind_listener(bind: &str, port: u16) -> io::Result<TcpListener> {
    let ip: IpAddr = bind
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not an IP address: {bind}"),
            )
        })?;
    match listen(SocketAddr::new(ip, port)) {
        Err(e) if ip == IpAddr::V6(Ipv6Addr::UNSPECIFIED) && ipv6_unavailable(&e) => {
            tracing::warn!(error = %e, "no IPv6 on this host; listening on IPv4 only");
            listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
        }
        other => other,
    }
}

fn ipv6_unavailable(e: &io::Error) -> bool {
    const EAFNOSUPPORT: i32 = 97; // Linux: address family not supported (IPv6 disabled)
    e.raw_os_error() == Some(EAFNOSUPPORT)
        || e.kind() == io::ErrorKind::AddrNotAvailable
        || e.kind() == io::ErrorKind::Unsupported
}

fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    TcpListener::from_std(socket.into())
}
