//! The cross-memory probe exchange of [`crate::tcp::cma`] on every peer
//! connection, at connect.

use crate::tcp::cma::{self, Token};
use crate::tcp::config::TcpConfig;
use crate::tcp::error::TcpError;
use crate::tcp::wire::SessionId;

/// Runs the cross-memory probe exchange ([`cma::exchange`]) on every peer
/// connection at once and returns the connections with what each settled.
pub(super) fn probe_peers(
    runtime: &tokio::runtime::Runtime,
    cfg: &TcpConfig,
    streams: Vec<Option<tokio::net::TcpStream>>,
    session: SessionId,
    comm: u64,
    rank: u32,
) -> Result<(Vec<Option<tokio::net::TcpStream>>, Vec<cma::PeerCma>), TcpError> {
    // Lives until every exchange is over: peers read it before answering.
    let token = Token::new(session);
    let mine = token.probe(cfg.intra_cma && cma::AVAILABLE);
    let deadline = tokio::time::Instant::now() + cfg.connect_timeout;
    let results = runtime.block_on(async {
        let tasks: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(p, s)| {
                s.map(|mut s| {
                    tokio::spawn(async move {
                        let r = tokio::time::timeout_at(
                            deadline,
                            cma::exchange(&mut s, mine, session, comm, p as u32),
                        )
                        .await;
                        (s, r)
                    })
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(match t {
                Some(t) => Some(t.await),
                None => None,
            });
        }
        out
    });
    drop(token);
    let mut streams = Vec::new();
    let mut settled = Vec::new();
    for (p, r) in results.into_iter().enumerate() {
        let Some(r) = r else {
            streams.push(None);
            settled.push(cma::PeerCma::default());
            continue;
        };
        let (s, r) = r.map_err(|e| TcpError::io("cross-memory probe task", e))?;
        let reason = match r {
            Ok(Ok(c)) => {
                streams.push(Some(s));
                settled.push(c);
                continue;
            }
            Ok(Err(e)) => e,
            Err(_) => "no answer within HCCL_CONNECT_TIMEOUT".to_string(),
        };
        return Err(TcpError::PeerConnect {
            rank,
            peer: p as u32,
            addr: s
                .peer_addr()
                .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0))),
            reason: format!("cross-memory probe exchange: {reason}"),
        });
    }
    Ok((streams, settled))
}
