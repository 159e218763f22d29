//! The cross-memory probe exchange of [`crate::tcp::cma`] on every peer
//! connection, at connect.

use crate::shm::segment::Segment;
use crate::tcp::cma::{self, Token};
use crate::tcp::config::TcpConfig;
use crate::tcp::error::TcpError;
use crate::tcp::shm_link;
use crate::tcp::wire::SessionId;

/// What the probe settled per peer: the connection, the cross-memory
/// path, and the pair's mapped ring segment if it has one.
pub(super) type Probed = (
    Vec<Option<tokio::net::TcpStream>>,
    Vec<cma::PeerCma>,
    Vec<Option<Segment>>,
);

/// Runs the cross-memory probe exchange ([`cma::exchange`]) and then the
/// shared-memory offer ([`shm_link::exchange`]) on every peer connection
/// at once and returns the connections with what each settled.
pub(super) fn probe_peers(
    runtime: &tokio::runtime::Runtime,
    cfg: &TcpConfig,
    streams: Vec<Option<tokio::net::TcpStream>>,
    session: SessionId,
    comm: u64,
    rank: u32,
) -> Result<Probed, TcpError> {
    // Lives until every exchange is over: peers read it before answering.
    let token = Token::new(session);
    let mine = token.probe(cfg.intra_cma && cma::AVAILABLE);
    let shm = cfg.shm && cma::AVAILABLE;
    let deadline = tokio::time::Instant::now() + cfg.connect_timeout;
    let results = runtime.block_on(async {
        let tasks: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(p, s)| {
                s.map(|mut s| {
                    tokio::spawn(async move {
                        let peer = p as u32;
                        let r = tokio::time::timeout_at(deadline, async {
                            let c = cma::exchange(&mut s, mine, session, comm, peer).await?;
                            let at = (rank < peer, peer, c.peer_pid);
                            let seg = shm_link::exchange(&mut s, (session, comm), at, shm).await?;
                            Ok::<_, String>((c, seg))
                        })
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
    let mut segments = Vec::new();
    for (p, r) in results.into_iter().enumerate() {
        let Some(r) = r else {
            streams.push(None);
            settled.push(cma::PeerCma::default());
            segments.push(None);
            continue;
        };
        let (s, r) = r.map_err(|e| TcpError::io("cross-memory probe task", e))?;
        let reason = match r {
            Ok(Ok((c, seg))) => {
                streams.push(Some(s));
                settled.push(c);
                segments.push(seg);
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
    Ok((streams, settled, segments))
}
