//! `session_dial`: a TCP connection to a server a program of the session runs on the
//! jail's own loopback, for a client on the host (the E2B gateway's `get_host(port)`,
//! `brig session dial`). The jail's init opens it inside the jail's network namespace
//! (`Command::Dial`; the runner cannot enter that namespace rootless) and hands it to
//! the runner, which passes it on with the `dialed` reply (SCM_RIGHTS) and closes its
//! copy. The descriptor flows host-ward only: nothing of the host goes into the jail,
//! and a jail on `--net none` serves as well as a filtered one, since the connection
//! never leaves its namespace.

use super::protocol;
use super::reply::SessionReply;
use crate::error::{Error, ErrorKind, Result};
use crate::jail::SessionJail;
use std::os::fd::{AsFd, OwnedFd};

/// Connects to `port` and answers the client on `connection` with the connection's
/// descriptor; None: answered.
pub fn answer(
    jail: &mut SessionJail,
    session: &str,
    port: u32,
    connection: &OwnedFd,
) -> Result<Option<SessionReply>> {
    let port = checked_port(port)?;
    let dialed = jail
        .dial(port)?
        .map_err(|errno| refused(session, port, errno))?;
    // What comes over the jail's descriptor socket is passed on only if it is what init
    // makes: a TCP socket (a client treats it as one).
    if !is_tcp_socket(&dialed) {
        return Err(Error::setup(format!(
            "session_dial: port {port} of session {session}: the jail handed over a descriptor that is not a TCP socket; it was closed"
        )));
    }
    let reply = SessionReply::Dialed {
        session: session.to_string(),
        port,
    };
    protocol::write_frame(connection.as_fd(), &reply, &[dialed.as_fd()])?;
    Ok(None)
}

/// Whether `fd` is a TCP socket (IPv4 or IPv6, a stream).
fn is_tcp_socket(fd: &OwnedFd) -> bool {
    use nix::sys::socket::{AddressFamily, SockType, SockaddrLike, SockaddrStorage};
    let stream = nix::sys::socket::getsockopt(fd, nix::sys::socket::sockopt::SockType)
        .is_ok_and(|kind| kind == SockType::Stream);
    let family =
        nix::sys::socket::getsockname::<SockaddrStorage>(std::os::fd::AsRawFd::as_raw_fd(fd))
            .ok()
            .and_then(|address| address.family());
    stream && matches!(family, Some(AddressFamily::Inet | AddressFamily::Inet6))
}

/// A TCP port a server can listen on: 1 to 65535.
fn checked_port(port: u32) -> Result<u16> {
    u16::try_from(port)
        .ok()
        .filter(|port| *port != 0)
        .ok_or_else(|| {
            Error::input(format!(
                "session_dial: \"port\": {port} is not a TCP port a server can listen on; give 1-65535"
            ))
        })
}

/// Why the jail's loopback did not take the connection, in words a client can act on.
fn refused(session: &str, port: u16, errno: nix::errno::Errno) -> Error {
    let at = format!("session_dial: port {port} of session {session}");
    match errno {
        nix::errno::Errno::ECONNREFUSED => Error::of_kind(
            ErrorKind::BadInput,
            format!(
                "{at}: connection refused: nothing listens there; is a server listening on 0.0.0.0 or 127.0.0.1 inside the sandbox?"
            ),
        ),
        errno => Error::os(format!("{at}: connect to it on the jail's loopback"), errno),
    }
}

#[cfg(test)]
mod tests {
    use super::{checked_port, refused};
    use crate::error::ErrorKind;

    #[test]
    fn a_port_is_one_to_65535() {
        assert_eq!(checked_port(8000).unwrap(), 8000);
        assert_eq!(checked_port(65535).unwrap(), 65535);
        for port in [0, 65536, u32::MAX] {
            let err = checked_port(port).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::BadInput);
            assert!(err.to_string().contains("\"port\""), "{err}");
        }
    }

    #[test]
    fn only_a_tcp_socket_is_passed_on() {
        use super::is_tcp_socket;
        use std::os::fd::OwnedFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let connection = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(is_tcp_socket(&OwnedFd::from(connection)));
        let (unix, _) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!is_tcp_socket(&OwnedFd::from(unix)));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!is_tcp_socket(&OwnedFd::from(udp)));
        let (pipe, _) = nix::unistd::pipe().unwrap();
        assert!(!is_tcp_socket(&pipe));
    }

    #[test]
    fn a_closed_port_says_what_to_check() {
        let err = refused("ab12", 8000, nix::errno::Errno::ECONNREFUSED);
        assert_eq!(err.kind(), ErrorKind::BadInput);
        assert!(
            err.to_string()
                .contains("is a server listening on 0.0.0.0 or 127.0.0.1 inside the sandbox?"),
            "{err}"
        );
        let err = refused("ab12", 8000, nix::errno::Errno::EMFILE);
        assert_eq!(err.kind(), ErrorKind::SetupFailed);
    }
}
